#include "io/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "io/file_io.h"
#include "leantrain/error.h"

namespace lt::io {

namespace {

[[noreturn]] void not_regular(const std::string& path, mode_t m) {
  fail("cannot read '" + path + "'", "it is " + detail::file_kind(m) + ", not a regular file",
       "pass the path of a regular file");
}

[[noreturn]] void too_large(const std::string& path, int64_t max_bytes, const std::string& as_what,
                            const std::string& fix) {
  fail("cannot read '" + path + "'", "it is larger than " + limit_str(max_bytes) + ", the most leantrain reads " + as_what,
       fix);
}

}  // namespace

std::string limit_str(int64_t bytes) {
  constexpr int64_t MiB = int64_t(1) << 20, GiB = int64_t(1) << 30;
  if (bytes >= GiB && bytes % GiB == 0) return std::to_string(bytes / GiB) + " GiB";
  if (bytes >= MiB && bytes % MiB == 0) return std::to_string(bytes / MiB) + " MiB";
  return std::to_string(bytes) + " bytes";
}

InputFile::InputFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) {
    const int err = errno;
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) not_regular(path, st.st_mode);  // e.g. a socket
    fail("cannot read '" + path + "'", err == ENOENT ? "the file does not exist" : std::strerror(err),
         "check the path and its permissions");
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    fail("cannot read '" + path + "'", std::strerror(err), "check the path and its permissions");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    not_regular(path, st.st_mode);
  }
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);  // plain blocking reads from here on
  size_ = int64_t(st.st_size);
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

int InputFile::release() {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

std::string InputFile::read_all(int64_t max_bytes, const std::string& as_what, const std::string& fix) {
  if (size_ > max_bytes) too_large(path_, max_bytes, as_what, fix);
  std::string out;
  out.reserve(size_t(size_));
  char chunk[1 << 16];
  for (;;) {
    ssize_t got = ::read(fd_, chunk, sizeof chunk);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail("cannot read '" + path_ + "'", std::strerror(errno), "check the file and the disk");
    if (got == 0) break;
    // The size at open is not a bound: the file may grow, and /proc-like files report 0 or 4096.
    if (int64_t(out.size()) + got > max_bytes) too_large(path_, max_bytes, as_what, fix);
    out.append(chunk, size_t(got));
  }
  return out;
}

std::string read_input_file(const std::string& path, int64_t max_bytes, const std::string& as_what,
                            const std::string& fix) {
  return InputFile(path).read_all(max_bytes, as_what, fix);
}

void check_input_file_if_exists(const std::string& path, int64_t max_bytes, const std::string& as_what,
                                const std::string& fix) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return;  // missing: the caller says so in its own words
  InputFile f(path);
  if (f.size() > max_bytes) too_large(path, max_bytes, as_what, fix);
}

}  // namespace lt::io
