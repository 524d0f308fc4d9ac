// The MPI communicator (CPU backend; built when CMake finds MPI). MPI only moves bytes here
// (alltoall, allgather, gather, bcast); the sums are ours, in rank order (reduce_order.h), so a
// run gives the same numbers every time whatever the timing.
//
// all_reduce = reduce_scatter + all_gather over chunks of the buffer (each rank sums 1/W of it),
// in pieces of at most kPieceBytes so counts stay within MPI's int and the staging stays small.
//
// A watchdog thread ends this process with one line when a collective runs past
// timeout_seconds() (a rank died or hangs): exiting without MPI_Finalize makes mpirun end the
// others, so the job never hangs.
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>
#include <unistd.h>
#include <vector>

#include "dist/reduce_order.h"
#include "leantrain/usage_error.h"

namespace lt::dist {

namespace {

constexpr int64_t kPieceBytes = int64_t(64) << 20;

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  fail(std::string("MPI ") + what, std::string(msg, size_t(len)), "check that every rank is alive and runs the same command");
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Ends the process when one collective lasts longer than the timeout.
class Watchdog {
 public:
  Watchdog(int rank, double timeout) : rank_(rank), timeout_(timeout), thread_([this] { loop(); }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> l(m_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void begin(const char* what) {
    what_.store(what);
    started_.store(now_s());
  }
  void end() { started_.store(0); }

 private:
  void loop() {
    std::unique_lock<std::mutex> l(m_);
    while (!stop_) {
      cv_.wait_for(l, std::chrono::milliseconds(200));
      double t = started_.load();
      if (t > 0 && now_s() - t > timeout_) {
        std::fprintf(stderr,
                     "leantrain: error: rank %d: MPI %s did not finish in %.0f s: another rank died or hangs "
                     "(see its error; --dist-timeout sets the limit)\n",
                     rank_, what_.load(), timeout_);
        std::fflush(stderr);
        _exit(1);  // without MPI_Finalize: mpirun ends the other ranks
      }
    }
  }
  int rank_;
  double timeout_;
  std::atomic<double> started_{0};
  std::atomic<const char*> what_{""};
  std::mutex m_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "init");
      owns_init_ = true;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    // Errors come back as codes (one lt::Error line) instead of MPI's default abort.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    watchdog_ = std::make_unique<Watchdog>(rank_, timeout_seconds());
  }
  ~MpiCommunicator() override {
    watchdog_.reset();
    // Finalizing waits for the other ranks: only on the way out of a run that went well. After an
    // error the process exits without it, and mpirun ends the others.
    if (owns_init_ && std::uncaught_exceptions() == 0) MPI_Finalize();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "mpi"; }

  void all_reduce(void* buf, int64_t count, DType dt, ReduceOp op, void*) override {
    detail::check_reducible(dt);
    const int64_t es = int64_t(dtype_size(dt));
    const int64_t piece = std::max<int64_t>(size_, kPieceBytes / es / size_ * size_);
    for (int64_t at = 0; at < count; at += piece) {
      const int64_t n = std::min(piece, count - at);
      const int64_t chunk = (n + size_ - 1) / size_;  // padded so every rank sums an equal chunk
      staging_.assign(size_t(chunk * size_ * es), 0);
      std::memcpy(staging_.data(), static_cast<char*>(buf) + at * es, size_t(n * es));
      mine_.resize(size_t(chunk * es));
      reduce_scatter_piece(staging_.data(), mine_.data(), chunk, dt, op);
      all_gather_piece(mine_.data(), staging_.data(), chunk * es);
      std::memcpy(static_cast<char*>(buf) + at * es, staging_.data(), size_t(n * es));
    }
  }

  void reduce_scatter(const void* send, void* recv, int64_t count, DType dt, ReduceOp op, void*) override {
    detail::check_reducible(dt);
    check_int(count * int64_t(dtype_size(dt)) * size_, "reduce_scatter");
    reduce_scatter_piece(send, recv, count, dt, op);
  }

  void all_gather(const void* send, void* recv, int64_t count, DType dt, void*) override {
    check_int(count * int64_t(dtype_size(dt)) * size_, "all_gather");
    all_gather_piece(send, recv, count * int64_t(dtype_size(dt)));
  }

  void reduce(void* buf, int64_t count, DType dt, ReduceOp op, int root, void*) override {
    detail::check_reducible(dt);
    const int64_t es = int64_t(dtype_size(dt));
    const int64_t piece = std::max<int64_t>(1, kPieceBytes / es / size_);
    for (int64_t at = 0; at < count; at += piece) {
      const int64_t n = std::min(piece, count - at);
      char* p = static_cast<char*>(buf) + at * es;
      if (rank_ == root) staging_.resize(size_t(n * es * size_));
      watchdog_->begin("reduce");
      check(MPI_Gather(p, int(n * es), MPI_BYTE, rank_ == root ? staging_.data() : nullptr, int(n * es), MPI_BYTE, root,
                       MPI_COMM_WORLD),
            "reduce");
      watchdog_->end();
      if (rank_ == root) detail::sum_in_rank_order(staging_.data(), n, size_, p, n, dt, op);
    }
  }

  void broadcast(void* buf, int64_t bytes, int root, void*) override {
    for (int64_t at = 0; at < bytes; at += kPieceBytes) {
      const int64_t n = std::min(kPieceBytes, bytes - at);
      watchdog_->begin("broadcast");
      check(MPI_Bcast(static_cast<char*>(buf) + at, int(n), MPI_BYTE, root, MPI_COMM_WORLD), "broadcast");
      watchdog_->end();
    }
  }

  void barrier() override {
    watchdog_->begin("barrier");
    check(MPI_Barrier(MPI_COMM_WORLD), "barrier");
    watchdog_->end();
  }

 private:
  static void check_int(int64_t bytes, const char* what) {
    if (bytes > int64_t(INT32_MAX))
      fail(std::string("an MPI ") + what + " of " + std::to_string(bytes) + " bytes",
           "MPI counts are 32-bit; only all_reduce, reduce and broadcast split their buffers",
           "call it on smaller pieces");
  }
  // send[size * count] -> recv[count]: every rank's chunk `rank_` arrives here, then is summed in rank order.
  void reduce_scatter_piece(const void* send, void* recv, int64_t count, DType dt, ReduceOp op) {
    const int64_t bytes = count * int64_t(dtype_size(dt));
    gathered_.resize(size_t(bytes * size_));
    watchdog_->begin("reduce_scatter");
    check(MPI_Alltoall(send, int(bytes), MPI_BYTE, gathered_.data(), int(bytes), MPI_BYTE, MPI_COMM_WORLD),
          "reduce_scatter");
    watchdog_->end();
    detail::sum_in_rank_order(gathered_.data(), count, size_, recv, count, dt, op);
  }
  void all_gather_piece(const void* send, void* recv, int64_t bytes) {
    watchdog_->begin("all_gather");
    check(MPI_Allgather(send, int(bytes), MPI_BYTE, recv, int(bytes), MPI_BYTE, MPI_COMM_WORLD), "all_gather");
    watchdog_->end();
  }

  int rank_ = 0, size_ = 1;
  bool owns_init_ = false;
  std::vector<char> staging_, mine_, gathered_;
  std::unique_ptr<Watchdog> watchdog_;
};

}  // namespace

bool mpi_built() { return true; }
std::unique_ptr<Communicator> make_mpi_communicator() { return std::make_unique<MpiCommunicator>(); }
void mpi_abort(int code) {
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (inited && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
}

}  // namespace lt::dist
