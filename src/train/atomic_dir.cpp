#include "train/atomic_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/input_file.h"
#include "leantrain/error.h"

namespace fs = std::filesystem;

namespace lt {

namespace {

void fsync_path(const std::string& p) {
  int fd = ::open(p.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

std::string parent_of(const std::string& p) {
  fs::path parent = fs::path(p).parent_path();
  return parent.empty() ? "." : parent.string();
}

}  // namespace

StagedDir::StagedDir(std::string dir) : dir_(std::move(dir)) {
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
  tmp_ = dir_ + ".tmp";
  std::error_code ec;
  fs::create_directories(parent_of(dir_), ec);
  fs::remove_all(tmp_, ec);
  if (!fs::create_directory(tmp_, ec) || ec)
    fail("cannot write checkpoint '" + dir_ + "'", "creating " + tmp_ + " failed: " + ec.message(),
         "check that the directory is writable or pass another --save");
}

StagedDir::~StagedDir() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(tmp_, ec);
}

void StagedDir::commit() {
  std::error_code ec;
  fsync_path(tmp_);
  std::string old = dir_ + ".old";
  fs::remove_all(old, ec);
  bool had = fs::exists(dir_);
  if (had) {
    fs::rename(dir_, old, ec);
    if (ec) fail("cannot replace checkpoint '" + dir_ + "'", ec.message(), "check the directory's permissions");
  }
  fs::rename(tmp_, dir_, ec);
  if (ec) {
    if (had) fs::rename(old, dir_, ec);  // put the previous checkpoint back
    fail("cannot replace checkpoint '" + dir_ + "'", ec.message(), "check the directory's permissions");
  }
  fsync_path(parent_of(dir_));
  committed_ = true;
  fs::remove_all(old, ec);
}

void write_text_file(const std::string& path, const std::string& text) {
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(text.data(), std::streamsize(text.size()));
    f.flush();
    if (!f) fail("cannot write '" + path + "'", std::strerror(errno), "check free disk space and permissions");
  }
  fsync_path(path);
}

void check_checkpoint_dir(const std::string& dir) {
  std::error_code ec;
  if (fs::is_directory(dir, ec)) return;
  if (fs::exists(dir, ec))
    fail("checkpoint '" + dir + "' is not a directory", "a checkpoint is the directory written by --save",
         "pass the directory given to 'leantrain train --save'");
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  if (fs::is_directory(d + ".old", ec))
    fail("checkpoint '" + dir + "' not found", "a save was interrupted; the previous checkpoint is in " + d + ".old",
         "rename " + d + ".old to " + d);
  fail("checkpoint '" + dir + "' not found", "no such directory", "pass the directory given to 'leantrain train --save'");
}

std::string read_text_file(const std::string& dir, const std::string& file) {
  check_checkpoint_dir(dir);
  std::string p = dir + "/" + file;
  io::check_input_file_if_exists(p, io::kMaxConfigBytes, "as a checkpoint's " + file,
                                 "pass a directory written by 'leantrain train --save'");
  std::ifstream f(p, std::ios::binary);
  if (!f)
    fail("'" + dir + "' is not a complete leantrain checkpoint", file + " is missing",
         "pass a directory written by 'leantrain train --save'");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace lt
