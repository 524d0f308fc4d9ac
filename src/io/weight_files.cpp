#include "io/weight_files.h"

#include <sys/stat.h>

#include <climits>
#include <cstdlib>

#include "io/input_file.h"
#include "leantrain/error.h"

namespace lt::io {

namespace {

std::string real_path(const std::string& p) {
  char buf[PATH_MAX];
  return ::realpath(p.c_str(), buf) ? std::string(buf) : std::string();
}

bool exists_no_follow(const std::string& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0;
}

const char* const kReexport = "re-export the checkpoint with transformers' save_pretrained or 'leantrain train --save'";

}  // namespace

std::string outside_dir_problem(const std::string& dir, const std::string& real_dir, const std::string& name) {
  const std::string p = dir + "/" + name;
  struct stat st {};
  if (::lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return "";
  const std::string target = real_path(p);
  if (target.empty()) return "it is a symlink to nothing";
  const std::string inside = real_dir == "/" ? "/" : real_dir + "/";
  if (target.compare(0, inside.size(), inside) != 0)
    return "it is a symlink to '" + target + "', outside the checkpoint directory";
  return "";
}

bool WeightFiles::present(const std::string& dir) {
  return exists_no_follow(dir + "/" + kWeightsFile) || exists_no_follow(dir + "/" + kWeightsIndexFile);
}

WeightFiles::WeightFiles(const std::string& dir) : dir_(dir) {
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
  real_dir_ = real_path(dir_);
  struct stat st {};
  if (real_dir_.empty() || ::stat(real_dir_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    fail("cannot load weights from '" + dir + "'", "it is not a directory",
         "pass a directory holding config.json and model.safetensors");
  if (exists_no_follow(dir_ + "/" + kWeightsFile)) open_single();
  else if (exists_no_follow(dir_ + "/" + kWeightsIndexFile)) open_sharded();
  else
    fail("no weights in '" + dir_ + "'", std::string("it has neither ") + kWeightsFile + " nor " + kWeightsIndexFile,
         "pass a directory saved by transformers' save_pretrained or 'leantrain train --save' (--config alone builds "
         "a randomly initialised model)");
}

void WeightFiles::add_file(const std::string& name) {
  if (std::string why = outside_dir_problem(dir_, real_dir_, name); !why.empty())
    fail("cannot load '" + dir_ + "/" + name + "'", why,
         "copy the file into the directory (a Hugging Face cache snapshot links to ../../blobs: download with "
         "--local-dir instead)");
  files_.push_back(std::make_unique<SafetensorsReader>(dir_ + "/" + name));
}

void WeightFiles::open_single() {
  add_file(kWeightsFile);
  for (const TensorEntry& e : files_.front()->entries()) {
    names_.push_back(e.name);
    where_[e.name] = {files_.front().get(), &e};
  }
}

void WeightFiles::open_sharded() {
  sharded_ = true;
  const std::string index_path = dir_ + "/" + kWeightsIndexFile;
  if (std::string why = outside_dir_problem(dir_, real_dir_, kWeightsIndexFile); !why.empty())
    fail("cannot load '" + index_path + "'", why, "copy the file into the directory");
  const std::string text =
      read_input_file(index_path, kMaxConfigBytes, "as a safetensors index", "pass an index written by save_pretrained");
  const SafetensorsIndex index = parse_safetensors_index(text, index_path);
  const std::string what = "inconsistent sharded checkpoint '" + dir_ + "'";
  for (const std::string& shard : index.shards) {
    const std::string p = dir_ + "/" + shard;
    if (!exists_no_follow(p))
      fail(what, "the shard '" + shard + "' named by " + kWeightsIndexFile + " is missing (the index names " +
                     std::to_string(index.shards.size()) + " shards)",
           "copy every shard of the checkpoint into the directory");
    add_file(shard);
    const SafetensorsReader* file = files_.back().get();
    for (const TensorEntry& e : file->entries()) {
      auto [it, fresh] = where_.emplace(e.name, Located{file, &e});
      if (!fresh)
        fail(what, "tensor '" + e.name + "' is in two shards, '" + it->second.file->path() + "' and '" + file->path() + "'",
             kReexport);
      names_.push_back(e.name);
    }
  }
  // Each tensor where the index says, and nowhere else.
  for (const std::string& name : names_) {
    const Located& at = where_[name];
    const std::string shard = at.file->path().substr(dir_.size() + 1);
    auto listed = index.weight_map.find(name);
    if (listed == index.weight_map.end())
      fail(what, "tensor '" + name + "' of shard '" + shard + "' is not in the index's weight_map", kReexport);
    if (listed->second != shard)
      fail(what, "the index puts tensor '" + name + "' in '" + listed->second + "', but it is in '" + shard + "'",
           kReexport);
  }
  for (const auto& [name, shard] : index.weight_map)
    if (!where_.count(name))
      fail(what, "tensor '" + name + "' is not in shard '" + shard + "', where the index puts it (a truncated or "
                 "mismatched shard)", kReexport);
}

WeightFiles::Located WeightFiles::find(const std::string& name) const {
  auto it = where_.find(name);
  return it == where_.end() ? Located{} : it->second;
}

std::string WeightFiles::describe() const {
  if (!sharded_) return kWeightsFile;
  return std::string(kWeightsIndexFile) + " (" + std::to_string(files_.size()) + " shards)";
}

}  // namespace lt::io
