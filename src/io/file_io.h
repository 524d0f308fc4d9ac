// POSIX file helpers for leantrain's files: exact positional reads, and the two writers every
// output goes through. Both check each write, fsync and close, name the path in their errors, and
// refuse a target that is not a regular file (io/output_target.h): a device node, FIFO, directory
// or dangling link is never replaced by a file, and a symlink is written through, never replaced.
//   AtomicFile  a whole file: written to a temp file beside the target, fsync'ed, renamed over it
//   StreamFile  a file that grows as a run goes (JSON lines), appended or started afresh
// Where the caller allows it, the path "-" means standard output instead.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace lt::io::detail {

// What a stat mode is, for messages: "a directory", "a FIFO (named pipe)", "a character device", ...
std::string file_kind(unsigned mode);

// Reads exactly n bytes at `offset`; throws lt::Error (naming `path`) on failure or end of file.
void read_exact(int fd, void* buf, int64_t n, int64_t offset, const std::string& path);

// What the path "-" means to a writer.
enum class Dash { Refused, Stdout };

class AtomicFile {
 public:
  // Checks the target and creates "<target>.tmp.<pid>.<n>" beside it (or uses stdout for "-").
  explicit AtomicFile(const std::string& path, Dash dash = Dash::Refused);
  ~AtomicFile();  // removes the temp file unless committed
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  void write(const void* data, int64_t n);
  void write(std::string_view s) { write(s.data(), int64_t(s.size())); }
  void commit();  // fsync, close, rename over the target, fsync the directory (stdout: flush)

 private:
  std::string path_, target_, tmp_;
  int fd_ = -1;
  bool stdout_ = false, committed_ = false;
};

class StreamFile {
 public:
  // Opens `path` (a regular file or a new one; "-" for stdout when allowed), appending or
  // truncating it. An empty path makes a StreamFile that writes nothing.
  StreamFile(const std::string& path, bool append, Dash dash = Dash::Refused);
  ~StreamFile();  // closes without reporting (call close() to have errors thrown)
  StreamFile(const StreamFile&) = delete;
  StreamFile& operator=(const StreamFile&) = delete;
  bool is_open() const { return fd_ >= 0 || stdout_; }
  void write(std::string_view s);  // the whole string, or a thrown lt::Error
  void close();                    // fsync and close (stdout: flush), checked

 private:
  std::string path_;
  int fd_ = -1;
  bool stdout_ = false;
};

}  // namespace lt::io::detail
