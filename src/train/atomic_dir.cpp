#include "train/atomic_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/file_io.h"
#include "io/output_target.h"
#include "io/input_file.h"
#include "leantrain/error.h"

namespace fs = std::filesystem;

namespace lt {

namespace {

void fsync_dir(const std::string& p) {
  int fd = ::open(p.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

bool is_empty_dir(const std::string& p) {
  std::error_code ec;
  return fs::is_directory(p, ec) && fs::is_empty(p, ec) && !ec;
}

// "" when a save may delete or replace `p`: nothing is there, an empty directory, or a checkpoint
// of ours. Otherwise what is there ("is a regular file", ...). A symlink is never followed here.
std::string replace_problem(const std::string& p) {
  const std::string kind = io::path_kind(p);
  if (kind.empty()) return "";
  if (kind != "a directory") return "is " + kind;
  if (is_empty_dir(p) || is_leantrain_checkpoint(p)) return "";
  return "is a directory that holds files but no leantrain checkpoint";
}

std::string real_path(const std::string& p) {
  char buf[PATH_MAX];
  return ::realpath(p.c_str(), buf) ? std::string(buf) : std::string();
}

// The marker's first bytes: a few lines; anything longer is not ours.
std::string marker_head(const std::string& dir) {
  const std::string p = (fs::path(dir) / kCheckpointMarker).string();
  if (io::path_kind(p) != "a regular file") return "";  // a symlink or a FIFO is never ours
  std::ifstream f(p, std::ios::binary);
  std::string head(512, '\0');
  f.read(head.data(), std::streamsize(head.size()));
  head.resize(size_t(f.gcount()));
  return head;
}

}  // namespace

std::string checkpoint_marker_text(SavedKind kind) {
  return std::string(kCheckpointFormat) + "\nkind: " + (kind == SavedKind::Model ? "model" : "checkpoint") +
         "\nThis directory was written by leantrain. The next save to it replaces the whole directory.\n";
}

std::optional<SavedKind> marker_kind(const std::string& dir) {
  const std::string head = marker_head(dir);
  const std::string format = std::string(kCheckpointFormat) + "\n";
  if (head.compare(0, format.size(), format) != 0) return std::nullopt;
  const std::string rest = head.substr(format.size());
  if (rest.rfind("kind: model\n", 0) == 0) return SavedKind::Model;
  if (rest.rfind("kind: checkpoint\n", 0) == 0) return SavedKind::Checkpoint;
  if (rest.rfind("kind: ", 0) == 0) return std::nullopt;  // a kind this version does not know
  return SavedKind::Checkpoint;                            // a marker written before the kind line
}

bool is_leantrain_checkpoint(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return false;
  if (marker_kind(dir)) return true;
  // Checkpoints saved before the marker existed: trainer_state.json says what it is (a small
  // regular file; anything else is not ours, and a FIFO must not block the check).
  const fs::path state = fs::path(dir) / "trainer_state.json";
  if (!fs::is_regular_file(state, ec) || fs::file_size(state, ec) > (size_t(16) << 20) || ec) return false;
  std::ifstream f(state, std::ios::binary);
  if (!f) return false;
  try {
    nlohmann::json j = nlohmann::json::parse(f);
    return j.is_object() && j.contains("format") && j["format"] == kCheckpointFormat;
  } catch (const std::exception&) {
    return false;
  }
}

SaveTarget save_target(const std::string& given) {
  SaveTarget t;
  const std::string fix = "pass a new directory, an empty one, or a checkpoint directory written by --save";
  auto refuse = [&](std::string why, std::string f) {
    t.why = std::move(why);
    t.fix = std::move(f);
    return t;
  };
  std::string d = given;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  if (d.empty()) return refuse("the path is empty", fix);
  if (d == "-") return refuse("a checkpoint is a directory, and '-' (standard output) is none", fix);
  std::string kind = io::path_kind(d);
  if (kind == "a symlink") {
    const std::string real = real_path(d);
    if (real.empty()) return refuse("it is a symlink to nothing", "remove the link or " + fix);
    kind = io::path_kind(real);
    if (kind != "a directory")
      return refuse("it is a symlink to " + kind + " (" + real + "), and a checkpoint is a directory", fix);
    d = real;  // the link stays; the directory it points to is replaced
  } else if (kind == "a directory") {
    d = real_path(d);
  }
  if (d.empty() || d == "/") return refuse("it is the root directory", fix);
  t.dir = d;
  if (kind == "a directory" && !is_empty_dir(d) && !is_leantrain_checkpoint(d))
    return refuse("it is a directory that holds files but no leantrain checkpoint (no valid " + std::string(kCheckpointMarker) +
                      " or trainer_state.json), and a save replaces the directory whole",
                  fix);
  if (!kind.empty() && kind != "a directory") return refuse("it is " + kind + ", and a checkpoint is a directory", fix);
  for (const char* suffix : {".tmp", ".old"}) {
    const std::string side = d + suffix;
    if (std::string why = replace_problem(side); !why.empty())
      return refuse(side + " " + why + ", and a save uses that path (it stages the new checkpoint in " + d +
                        ".tmp and keeps the previous one in " + d + ".old while swapping)",
                    "move " + side + " away, or pass another --save");
  }
  // The renames happen in DIR's parent; a missing parent is created from the nearest ancestor.
  std::string ancestor = io::parent_dir(d);
  if (kind.empty())
    while (io::path_kind(ancestor).empty() && ancestor != "/" && ancestor != ".") ancestor = io::parent_dir(ancestor);
  if (std::string why = io::create_problem(ancestor); !why.empty())
    return refuse(why, "pass a --save path in a writable directory");
  return t;
}

StagedDir::StagedDir(const std::string& dir, SavedKind kind) : given_(dir) {
  SaveTarget t = save_target(dir);
  if (!t.ok()) fail("cannot save a checkpoint to " + dir, t.why, t.fix);
  dir_ = t.dir;
  tmp_ = dir_ + ".tmp";
  std::error_code ec;
  fs::create_directories(io::parent_dir(dir_), ec);
  if (!io::path_kind(tmp_).empty()) fs::remove_all(tmp_, ec);  // an interrupted save's (save_target checked it)
  if (!fs::create_directory(tmp_, ec) || ec)
    fail("cannot save a checkpoint to " + dir, "creating " + tmp_ + " failed: " + ec.message(),
         "check that the directory is writable or pass another --save");
  // The marker goes first, so an interrupted save's DIR.tmp is recognised as ours.
  io::detail::StreamFile marker(path(kCheckpointMarker), false);
  marker.write(checkpoint_marker_text(kind));
  marker.close();
}

StagedDir::~StagedDir() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(tmp_, ec);
}

void StagedDir::commit() {
  fsync_dir(tmp_);
  const std::string old = dir_ + ".old";
  // Checked again: a run can be long, and what sits at these paths may have changed since.
  for (const std::string& p : {dir_, old})
    if (std::string why = replace_problem(p); !why.empty())
      fail("cannot save a checkpoint to " + given_, p + " " + why + " (it appeared during the run)",
           "move it away, or pass another --save");
  std::error_code ec;
  fs::remove_all(old, ec);
  const bool had = !io::path_kind(dir_).empty();
  if (had) {
    fs::rename(dir_, old, ec);
    if (ec) fail("cannot replace checkpoint '" + given_ + "'", ec.message(), "check the directory's permissions");
  }
  fs::rename(tmp_, dir_, ec);
  if (ec) {
    if (had) fs::rename(old, dir_, ec);  // put the previous checkpoint back
    fail("cannot replace checkpoint '" + given_ + "'", ec.message(), "check the directory's permissions");
  }
  fsync_dir(io::parent_dir(dir_));
  committed_ = true;
  fs::remove_all(old, ec);
}

void write_text_file(const std::string& path, const std::string& text) {
  io::detail::AtomicFile f(path);
  f.write(text);
  f.commit();
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
