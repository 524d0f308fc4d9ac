// Asynchronous reads and writes of one file for --offload-dir (disk_state.h): io_uring when the
// build has liburing and the kernel lets the process set up a ring (containers often forbid it),
// else a few threads doing pread/pwrite. Both split a request into pieces of at most
// kDiskIoPiece bytes, so one large request keeps several in flight (the drive's queue depth).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace lt::offload {

inline constexpr int64_t kDiskIoPiece = int64_t(8) << 20;

struct DiskRequest {
  bool write = false;
  void* buf = nullptr;  // O_DIRECT: 4096-aligned, as are len and offset
  int64_t len = 0;
  int64_t offset = 0;
  // Called once, on an I/O thread, when every piece is done: 0, or an errno of the first failure.
  std::function<void(int err)> done;
};

class DiskIo {
 public:
  virtual ~DiskIo() = default;
  virtual void submit(DiskRequest r) = 0;
  virtual const char* name() const = 0;  // "io_uring" or "threads"
};

// `prefer_uring` false (or LEANTRAIN_DISK_IO=threads) takes the threads outright.
std::unique_ptr<DiskIo> make_disk_io(int fd, bool prefer_uring = true);

}  // namespace lt::offload
