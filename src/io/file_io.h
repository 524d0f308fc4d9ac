// POSIX file helpers for src/io: exact positional reads and an atomic writer (temp file in the
// same directory, fsync, rename, fsync of the directory), with errors naming the path.
#pragma once
#include <cstdint>
#include <string>

namespace lt::io::detail {

// Reads exactly n bytes at `offset`; throws lt::Error (naming `path`) on failure or end of file.
void read_exact(int fd, void* buf, int64_t n, int64_t offset, const std::string& path);

class AtomicFile {
 public:
  explicit AtomicFile(const std::string& path);  // creates "<path>.tmp.<pid>"
  ~AtomicFile();                                  // removes the temp file unless committed
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  void write(const void* data, int64_t n);
  void commit();  // fsync, close, rename over the target, fsync the directory

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace lt::io::detail
