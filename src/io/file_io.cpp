#include "io/file_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "io/output_target.h"
#include "leantrain/error.h"

namespace lt::io::detail {

std::string file_kind(unsigned mode) {
  const mode_t m = mode_t(mode);
  if (S_ISREG(m)) return "a regular file";
  if (S_ISDIR(m)) return "a directory";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISLNK(m)) return "a symlink";
  return "a special file";
}

namespace {

std::string errno_text(const char* call) { return std::string(call) + ": " + std::strerror(errno); }

[[noreturn]] void cannot_write(const std::string& path, const std::string& why) {
  fail("cannot write '" + path + "'", why, "check the free disk space and the path");
}

// A write past the file-size limit (ulimit -f) fails with EFBIG once SIGXFSZ is ignored (cli/app.cpp).
std::string write_problem(int err) {
  if (err == EFBIG) return std::string(std::strerror(err)) + ": the file-size limit (ulimit -f) is reached";
  return std::strerror(err);
}

// The target of an output path, or a thrown lt::Error saying why it cannot be written.
std::string checked_target(const std::string& path) {
  OutputTarget t = output_target(path);
  if (!t.ok()) fail("cannot write '" + path + "'", t.why, t.fix);
  return t.file;
}

void refuse_dash(const std::string& path, Dash dash) {
  if (path == "-" && dash == Dash::Refused)
    fail("cannot write '-'", "this output cannot go to standard output", "pass a file path");
}

void write_all(int fd, const void* data, int64_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    size_t chunk = size_t(std::min<int64_t>(n, int64_t(1) << 30));
    ssize_t put = ::write(fd, p, chunk);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) cannot_write(path, put < 0 ? write_problem(errno) : "the write made no progress");
    p += put;
    n -= put;
  }
}

[[noreturn]] void cannot_write_stdout() {
  fail("cannot write to standard output", std::strerror(errno), "free space where it goes, or redirect it");
}

void write_stdout(const void* data, int64_t n) {
  if (n > 0 && std::fwrite(data, 1, size_t(n), stdout) != size_t(n)) cannot_write_stdout();
}

void flush_stdout() {
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) cannot_write_stdout();
}

// "<name>.tmp.<pid>.<n>": a temp file of AtomicFile for `name`; its pid in *pid.
bool is_temp_of(const std::string& entry, const std::string& name, long* pid) {
  const std::string head = name + ".tmp.";
  if (entry.compare(0, head.size(), head) != 0) return false;
  const std::string rest = entry.substr(head.size());
  const size_t dot = rest.find('.');
  auto digits = [](const std::string& s) { return !s.empty() && s.size() <= 9 && s.find_first_not_of("0123456789") == std::string::npos; };
  if (dot == std::string::npos || !digits(rest.substr(0, dot)) || !digits(rest.substr(dot + 1))) return false;
  *pid = std::stol(rest.substr(0, dot));
  return true;
}

// Removes the temp files an earlier writer of `target` left when it was killed (a signal, a
// power cut): regular files named as ours whose process no longer runs here and that have not
// changed for a minute (a writer on another host sharing the directory has other pids).
void remove_stale_temps(const std::string& target) {
  const std::string dir = parent_dir(target);
  const std::string name = target.substr(target.find_last_of('/') + 1);
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  while (const dirent* e = ::readdir(d)) {
    long pid = 0;
    if (!is_temp_of(e->d_name, name, &pid) || pid <= 0) continue;
    if (::kill(pid_t(pid), 0) == 0 || errno != ESRCH) continue;  // that writer still runs
    const std::string p = dir + "/" + e->d_name;
    struct stat st {};
    if (::lstat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_mtime < ::time(nullptr) - 60) ::unlink(p.c_str());
  }
  ::closedir(d);
}

// fsync that tolerates file systems and files that cannot sync (EINVAL: e.g. a pipe).
bool synced(int fd) { return ::fsync(fd) == 0 || errno == EINVAL || errno == EROFS; }

}  // namespace

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

AtomicFile::AtomicFile(const std::string& path, Dash dash) : path_(path) {
  refuse_dash(path, dash);
  if (path == "-") {
    stdout_ = true;
    return;
  }
  target_ = checked_target(path);
  struct stat old {};
  const bool replacing = ::stat(target_.c_str(), &old) == 0;
  remove_stale_temps(target_);
  // O_EXCL with a fresh name: a file that happens to have the temp name is never truncated.
  for (int n = 0; fd_ < 0 && n < 100; ++n) {
    tmp_ = target_ + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(n);
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ < 0 && errno != EEXIST) break;
  }
  if (fd_ < 0) fail("cannot write '" + path + "'", "creating " + tmp_ + " failed: " + write_problem(errno),
                    "check that the directory is writable");
  if (replacing) ::fchmod(fd_, old.st_mode & 07777);  // the replaced file keeps its permissions
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !tmp_.empty()) ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* data, int64_t n) {
  if (stdout_) write_stdout(data, n);
  else write_all(fd_, data, n, path_);
}

void AtomicFile::commit() {
  if (stdout_) {
    flush_stdout();
    committed_ = true;
    return;
  }
  if (!synced(fd_)) cannot_write(path_, "fsync: " + write_problem(errno));
  int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) cannot_write(path_, errno_text("close"));
  // The target is checked again: it may have changed since the constructor (a long run).
  if (checked_target(path_) != target_)
    fail("cannot write '" + path_ + "'", "it changed while the file was being written", "run again");
  if (::rename(tmp_.c_str(), target_.c_str()) != 0) cannot_write(path_, errno_text("rename"));
  committed_ = true;
  // Make the rename itself durable.
  int dfd = ::open(parent_dir(target_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    bool ok = synced(dfd);
    ::close(dfd);
    if (!ok) cannot_write(path_, errno_text("fsync of its directory"));
  }
}

StreamFile::StreamFile(const std::string& path, bool append, Dash dash) : path_(path) {
  if (path.empty()) return;
  refuse_dash(path, dash);
  if (path == "-") {
    stdout_ = true;
    return;
  }
  const std::string target = checked_target(path);
  // Opened without O_TRUNC and checked on the descriptor, so whatever is there by now is
  // truncated only once it is known to be a regular file (O_NONBLOCK: a FIFO never blocks).
  fd_ = ::open(target.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NONBLOCK | (append ? O_APPEND : 0), 0666);
  if (fd_ < 0) fail("cannot write '" + path + "'", std::strerror(errno), "check the path and its directory");
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    fail("cannot write '" + path + "'", "it is not a regular file", "pass a path to a regular file or a new one");
  }
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
  if (!append && ::ftruncate(fd_, 0) != 0) {
    const std::string why = errno_text("truncate");
    ::close(fd_);
    fd_ = -1;
    cannot_write(path, why);
  }
}

StreamFile::~StreamFile() {
  if (fd_ >= 0) ::close(fd_);
}

void StreamFile::write(std::string_view s) {
  if (stdout_) {
    write_stdout(s.data(), int64_t(s.size()));
    flush_stdout();  // a line at a time, as a file gets it
  } else if (fd_ >= 0) write_all(fd_, s.data(), int64_t(s.size()), path_);
}

void StreamFile::close() {
  if (stdout_) {
    flush_stdout();
    return;
  }
  if (fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;
  if (!synced(fd)) {
    const std::string why = errno_text("fsync");
    ::close(fd);
    cannot_write(path_, why);
  }
  if (::close(fd) != 0) cannot_write(path_, errno_text("close"));
}

}  // namespace lt::io::detail
