// Atomic replacement of a checkpoint directory. Files are written into DIR.tmp; commit() then
// renames DIR -> DIR.old, DIR.tmp -> DIR and removes DIR.old. A crash at any point leaves a
// complete checkpoint under DIR or DIR.old (and read_text_file's error says so).
#pragma once
#include <string>

namespace lt {

class StagedDir {
 public:
  explicit StagedDir(std::string dir);  // creates DIR.tmp (empty), and DIR's parent if needed
  ~StagedDir();                         // removes DIR.tmp unless committed
  std::string path(const std::string& file) const { return tmp_ + "/" + file; }
  void commit();

 private:
  std::string dir_, tmp_;
  bool committed_ = false;
};

// Writes a whole file and flushes it to disk (used inside a StagedDir).
void write_text_file(const std::string& path, const std::string& text);
// Reads a checkpoint file; a clear lt::Error when the directory or the file is missing.
std::string read_text_file(const std::string& dir, const std::string& file);
// Throws a clear lt::Error unless `dir` looks like a checkpoint directory.
void check_checkpoint_dir(const std::string& dir);

}  // namespace lt
