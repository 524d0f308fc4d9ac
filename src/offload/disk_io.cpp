// io_uring and thread-pool engines of disk_io.h.
#include "offload/disk_io.h"
#include "core/knobs.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#ifdef LEANTRAIN_HAVE_URING
#include <liburing.h>
#endif

namespace lt::offload {

namespace {

// What a request's pieces share: the count still out and the first error.
struct Pending {
  std::atomic<int> left{0};
  std::atomic<int> err{0};
  std::function<void(int)> done;
  void finish_piece(int e) {
    if (e) {
      int zero = 0;
      err.compare_exchange_strong(zero, e);
    }
    if (left.fetch_sub(1) == 1) done(err.load());
  }
};

struct Piece {
  bool write;
  char* buf;
  int64_t len, offset;
  std::shared_ptr<Pending> owner;
};

std::vector<Piece> split(DiskRequest& r, std::shared_ptr<Pending>& p) {
  p = std::make_shared<Pending>();
  p->done = std::move(r.done);
  std::vector<Piece> out;
  for (int64_t at = 0; at < r.len; at += kDiskIoPiece)
    out.push_back({r.write, static_cast<char*>(r.buf) + at, std::min(kDiskIoPiece, r.len - at), r.offset + at, p});
  p->left = int(out.size());
  return out;
}

// One piece done synchronously: the whole length, retrying short transfers and EINTR.
int transfer(int fd, const Piece& pc) {
  int64_t done = 0;
  while (done < pc.len) {
    const ssize_t n = pc.write ? ::pwrite(fd, pc.buf + done, size_t(pc.len - done), pc.offset + done)
                               : ::pread(fd, pc.buf + done, size_t(pc.len - done), pc.offset + done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EIO;  // past the end: the file was sized for every extent
    done += n;
  }
  return 0;
}

class ThreadDiskIo final : public DiskIo {
 public:
  explicit ThreadDiskIo(int fd, int threads = 4) : fd_(fd) {
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
  }
  ~ThreadDiskIo() override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }
  void submit(DiskRequest r) override {
    std::shared_ptr<Pending> p;
    std::vector<Piece> pieces = split(r, p);
    if (pieces.empty()) return p->done(0);
    {
      std::lock_guard<std::mutex> lk(mu_);
      for (Piece& pc : pieces) queue_.push_back(std::move(pc));
    }
    cv_.notify_all();
  }
  const char* name() const override { return "threads"; }

 private:
  void work() {
    for (;;) {
      Piece pc;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        pc = std::move(queue_.front());
        queue_.pop_front();
      }
      pc.owner->finish_piece(transfer(fd_, pc));
    }
  }
  int fd_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Piece> queue_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

#ifdef LEANTRAIN_HAVE_URING
// One ring; submissions under a lock from any thread, completions reaped by one thread of its
// own, which also resubmits the rest of a short transfer. At most kDepth pieces are in flight,
// so the completion queue (2 x kDepth) never overflows.
class UringDiskIo final : public DiskIo {
 public:
  static constexpr unsigned kDepth = 64;
  // nullptr when the kernel refuses a ring (seccomp in a container, an old kernel).
  static std::unique_ptr<UringDiskIo> open(int fd) {
    std::unique_ptr<UringDiskIo> io(new UringDiskIo(fd));
    if (io_uring_queue_init(2 * kDepth, &io->ring_, 0) != 0) return nullptr;
    io->reaper_ = std::thread([p = io.get()] { p->reap(); });
    return io;
  }
  ~UringDiskIo() override {
    {
      std::unique_lock<std::mutex> lk(mu_);
      room_.wait(lk, [&] { return in_flight_ == 0; });
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      io_uring_prep_nop(sqe);
      io_uring_sqe_set_data(sqe, nullptr);  // the reaper's signal to stop
      io_uring_submit(&ring_);
    }
    reaper_.join();
    io_uring_queue_exit(&ring_);
  }
  void submit(DiskRequest r) override {
    std::shared_ptr<Pending> p;
    std::vector<Piece> pieces = split(r, p);
    if (pieces.empty()) return p->done(0);
    for (Piece& pc : pieces) enqueue(new Piece(std::move(pc)));
  }
  const char* name() const override { return "io_uring"; }

 private:
  explicit UringDiskIo(int fd) : fd_(fd) {}
  void enqueue(Piece* pc) {
    std::unique_lock<std::mutex> lk(mu_);
    room_.wait(lk, [&] { return in_flight_ < kDepth; });
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (pc->write)
      io_uring_prep_write(sqe, fd_, pc->buf, unsigned(pc->len), uint64_t(pc->offset));
    else
      io_uring_prep_read(sqe, fd_, pc->buf, unsigned(pc->len), uint64_t(pc->offset));
    io_uring_sqe_set_data(sqe, pc);
    ++in_flight_;
    const int s = io_uring_submit(&ring_);
    if (s < 0) {  // nothing went in: finish it here with that error
      --in_flight_;
      lk.unlock();
      std::unique_ptr<Piece> own(pc);
      own->owner->finish_piece(-s);
    }
  }
  void reap() {
    for (;;) {
      io_uring_cqe* cqe = nullptr;
      const int w = io_uring_wait_cqe(&ring_, &cqe);
      if (w == -EINTR) continue;
      if (w < 0) std::abort();  // the ring itself broke: nothing can complete any more
      Piece* pc = static_cast<Piece*>(io_uring_cqe_get_data(cqe));
      const int res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      if (!pc) return;
      {
        std::lock_guard<std::mutex> lk(mu_);
        --in_flight_;
      }
      room_.notify_all();
      std::unique_ptr<Piece> own(pc);
      if (res > 0 && res < own->len) {  // short: the rest as a new piece
        own->buf += res;
        own->offset += res;
        own->len -= res;
        enqueue(own.release());
        continue;
      }
      own->owner->finish_piece(res < 0 ? -res : res == 0 ? EIO : 0);
    }
  }
  int fd_;
  io_uring ring_{};
  std::mutex mu_;
  std::condition_variable room_;
  unsigned in_flight_ = 0;
  std::thread reaper_;
};

#endif

}  // namespace

std::unique_ptr<DiskIo> make_disk_io(int fd, bool prefer_uring) {
  if (knob_choice("LEANTRAIN_DISK_IO") == "threads") prefer_uring = false;
#ifdef LEANTRAIN_HAVE_URING
  if (prefer_uring)
    if (std::unique_ptr<UringDiskIo> io = UringDiskIo::open(fd)) return io;
#endif
  return std::make_unique<ThreadDiskIo>(fd);
}

}  // namespace lt::offload
