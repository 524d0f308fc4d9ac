// What an output file may replace (docs/user-guide.md, "What leantrain writes and what it refuses
// to overwrite"). An output goes to a path that does not exist yet, in an existing writable
// directory, or to a regular file, which is then replaced whole. A symlink is followed and its
// target replaced; the link itself stays (docs/decisions.md). Everything else is refused: a
// directory, a device node, a FIFO, a socket, a dangling link. Replacing one of those by a
// regular file would destroy something leantrain did not make.
#pragma once
#include <string>

namespace lt::io {

struct OutputTarget {
  std::string file;  // the file to create or replace: the path itself, or a symlink's target
  std::string why;   // why the path cannot be written ("" when it can)
  std::string fix;   // what to change when it cannot
  bool ok() const { return why.empty(); }
};

// Where writing `path` lands, or why it cannot. Nothing is created or changed.
OutputTarget output_target(const std::string& path);

// "a regular file", "a directory", "a character device", ... of what `path` names without
// following a final symlink ("a symlink"), or "" when nothing is there.
std::string path_kind(const std::string& path);

// The directory that holds `path` ("." for a bare name).
std::string parent_dir(const std::string& path);

// Why a new entry cannot be created in directory `dir` ("" when it can): it is missing, not a
// directory, or not writable.
std::string create_problem(const std::string& dir);

}  // namespace lt::io
