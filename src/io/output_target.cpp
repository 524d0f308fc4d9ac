#include "io/output_target.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "io/file_io.h"

namespace lt::io {

namespace {

OutputTarget refuse(std::string why, std::string fix) {
  OutputTarget t;
  t.why = std::move(why);
  t.fix = std::move(fix);
  return t;
}

}  // namespace

std::string path_kind(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return "";
  return detail::file_kind(st.st_mode);
}

std::string parent_dir(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return p.substr(0, slash);
}

std::string create_problem(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return "the directory " + dir + " does not exist";
  if (!S_ISDIR(st.st_mode)) return dir + " is " + detail::file_kind(st.st_mode) + ", not a directory";
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    return errno == EROFS ? "the directory " + dir + " is on a read-only file system"
                          : "permission denied on the directory " + dir;
  return "";
}

OutputTarget output_target(const std::string& path) {
  const std::string elsewhere = "pass a path to a regular file or a new one";
  if (path.empty()) return refuse("the path is empty", elsewhere);
  struct stat st {};
  std::string file = path;
  if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    // Follow the link: the target is replaced and the link stays a link.
    char buf[PATH_MAX];
    if (::realpath(path.c_str(), buf) == nullptr)
      return refuse("it is a symlink to nothing (" + std::string(std::strerror(errno)) + ")",
                    "remove the link or pass another path");
    file = buf;
    if (::lstat(file.c_str(), &st) != 0) return refuse("it is a symlink to nothing", "remove the link or pass another path");
    if (!S_ISREG(st.st_mode))
      return refuse("it is a symlink to " + detail::file_kind(st.st_mode) + " (" + file + "), not to a regular file", elsewhere);
  } else if (::lstat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return refuse("it is a directory", "pass a file path inside it, e.g. " + path + "/out");
    if (!S_ISREG(st.st_mode))
      return refuse("it is " + detail::file_kind(st.st_mode) + ", which leantrain will not replace by a regular file",
                    elsewhere + ", or omit the flag to write nothing");
  } else if (errno != ENOENT) {
    return refuse(std::strerror(errno), elsewhere);
  }
  if (std::string why = create_problem(parent_dir(file)); !why.empty())
    return refuse(why, why.rfind("permission", 0) == 0 || why.find("read-only") != std::string::npos
                           ? "pass a path in a writable directory"
                           : "create it first or pass a path in an existing directory");
  if (S_ISREG(st.st_mode) && ::access(file.c_str(), W_OK) != 0 && errno != ENOENT)
    return refuse("permission denied on " + file, "pass a path in a writable directory");
  OutputTarget t;
  t.file = file;
  return t;
}

}  // namespace lt::io
