// io::InputFile: only regular files are read; a FIFO, a device, a directory or a socket is one
// error at open (never a hang), and a file read whole stops at its cap even when fstat's size is
// wrong.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "io/input_file.h"
#include "leantrain/error.h"
#include "unit/error_of.h"

namespace fs = std::filesystem;

namespace {

fs::path temp_dir() {
  fs::path d = fs::temp_directory_path() / ("lt_test_input_file_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

using lt::test::error_of;

}  // namespace

TEST(InputFile, ReadsRegularFiles) {
  fs::path d = temp_dir();
  std::ofstream(d / "a.txt") << "hello";
  lt::io::InputFile f((d / "a.txt").string());
  EXPECT_EQ(f.size(), 5);
  EXPECT_EQ(f.read_all(5, "as text", "fix"), "hello");
  EXPECT_EQ(lt::io::read_input_file((d / "a.txt").string(), 100, "as text", "fix"), "hello");
  fs::remove_all(d);
}

TEST(InputFile, RefusesEveryOtherKindAtOpen) {
  fs::path d = temp_dir();
  ASSERT_EQ(::mkfifo((d / "fifo").c_str(), 0600), 0);
  // Without O_NONBLOCK this open would wait forever for a writer.
  EXPECT_NE(error_of([&] { lt::io::InputFile f((d / "fifo").string()); }).find("it is a FIFO (named pipe), not a regular file"),
            std::string::npos);
  EXPECT_NE(error_of([&] { lt::io::InputFile f("/dev/zero"); }).find("'/dev/zero': it is a character device"),
            std::string::npos);
  EXPECT_NE(error_of([&] { lt::io::InputFile f(d.string()); }).find("it is a directory"), std::string::npos);
  EXPECT_NE(error_of([&] { lt::io::InputFile f((d / "missing").string()); }).find("the file does not exist"),
            std::string::npos);
  // A Unix socket: open() itself fails (ENXIO); the message still names the kind.
  int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(s, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string sock = (d / "sock").string();
  ASSERT_LT(sock.size(), sizeof addr.sun_path);
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", sock.c_str());
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  EXPECT_NE(error_of([&] { lt::io::InputFile f(sock); }).find("it is a socket"), std::string::npos);
  ::close(s);
  // check_input_file_if_exists: the same refusals, but a missing path passes.
  EXPECT_NE(error_of([&] { lt::io::check_input_file_if_exists((d / "fifo").string(), 10, "as x", "f"); }), "");
  EXPECT_EQ(error_of([&] { lt::io::check_input_file_if_exists((d / "missing").string(), 10, "as x", "f"); }), "");
  fs::remove_all(d);
}

TEST(InputFile, ReadAllStopsAtTheCap) {
  fs::path d = temp_dir();
  std::ofstream(d / "big") << std::string(100, 'x');
  const std::string e = error_of([&] { lt::io::read_input_file((d / "big").string(), 64, "as a config", "pass less"); });
  EXPECT_NE(e.find("it is larger than 64 bytes, the most leantrain reads as a config (pass less)"), std::string::npos) << e;
  // A file whose fstat size is 0 but which has content (procfs): the cap holds while reading.
  lt::io::InputFile proc("/proc/self/status");
  EXPECT_EQ(proc.size(), 0);
  EXPECT_NE(error_of([&] { proc.read_all(16, "as text", "f"); }).find("larger than 16 bytes"), std::string::npos);
  EXPECT_EQ(lt::io::limit_str(int64_t(4) << 30), "4 GiB");
  EXPECT_EQ(lt::io::limit_str(int64_t(64) << 20), "64 MiB");
  fs::remove_all(d);
}
