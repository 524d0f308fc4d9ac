#include "io/file_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "leantrain/error.h"

namespace lt::io::detail {

void read_exact(int fd, void* buf, int64_t n, int64_t offset, const std::string& path) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    size_t chunk = size_t(std::min<int64_t>(n, int64_t(1) << 30));
    ssize_t got = ::pread(fd, p, chunk, off_t(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail("cannot read '" + path + "'", std::strerror(errno), "check the file and the disk");
    if (got == 0)
      fail("cannot read '" + path + "'", "the file ended early (truncated while reading?)", "rewrite the file");
    p += got;
    n -= got;
    offset += got;
  }
}

AtomicFile::AtomicFile(const std::string& path) : path_(path), tmp_(path + ".tmp." + std::to_string(::getpid())) {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0)
    fail("cannot write '" + path + "'", std::string("creating the temp file failed: ") + std::strerror(errno),
         "check that the directory exists and is writable");
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* data, int64_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    size_t chunk = size_t(std::min<int64_t>(n, int64_t(1) << 30));
    ssize_t put = ::write(fd_, p, chunk);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0)
      fail("cannot write '" + path_ + "'", put < 0 ? std::strerror(errno) : "no progress", "check the free disk space");
    p += put;
    n -= put;
  }
}

void AtomicFile::commit() {
  if (::fsync(fd_) != 0) fail("cannot write '" + path_ + "'", std::string("fsync: ") + std::strerror(errno), "");
  int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) fail("cannot write '" + path_ + "'", std::string("close: ") + std::strerror(errno), "");
  if (::rename(tmp_.c_str(), path_.c_str()) != 0)
    fail("cannot write '" + path_ + "'", std::string("rename: ") + std::strerror(errno), "check the target path");
  committed_ = true;
  // Make the rename itself durable.
  std::string dir = std::filesystem::path(path_).parent_path().string();
  int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace lt::io::detail
