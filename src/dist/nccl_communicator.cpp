// The NCCL communicator (CUDA; built with -DLEANTRAIN_NCCL=ON). Collectives are enqueued on the
// caller's stream and return at once; the caller records an event after them and makes the
// compute stream wait on it. Rank 0 makes the unique id and hands it out through the TCP store
// (tcp_store.cpp). NCCL's ring order is fixed for a fixed topology, so sums repeat run to run.
//
// Failures: the communicator is made non-blocking; a watchdog thread polls ncclCommGetAsyncError
// and the age of the oldest unfinished collective (an event per call), and on an error or a
// collective older than timeout_seconds() prints one line, aborts the communicator and exits. A
// sentinel thread that calls neither CUDA nor NCCL ends the process if the watchdog itself blocks.
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "dist/peer_all_reduce.h"
#include "leantrain/dist.h"
#include "leantrain/error.h"
#include "core/knobs.h"

namespace lt::dist {

namespace {

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail(std::string("CUDA ") + what, cudaGetErrorString(e), "");
}

ncclDataType_t nccl_type(DType dt) {
  switch (dt) {
    case DType::F32: return ncclFloat32;
    case DType::BF16: return ncclBfloat16;
    case DType::F16: return ncclFloat16;
    case DType::F64: return ncclFloat64;
    case DType::I32: return ncclInt32;
    case DType::I64: return ncclInt64;
    default: return ncclUint8;
  }
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::Avg ? ncclAvg : ncclSum; }

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const LaunchInfo& li, int device)
      : rank_(li.rank), size_(li.world_size), device_(device), timeout_(timeout_seconds()) {
    check_cuda(cudaSetDevice(device), "cudaSetDevice");
    ncclUniqueId id{};
    if (rank_ == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    std::string blob = tcp_store_exchange(li, std::string(reinterpret_cast<const char*>(&id), sizeof id));
    if (blob.size() != sizeof id) fail("the NCCL unique id from rank 0", "it has the wrong size", "run the same leantrain on every rank");
    std::memcpy(&id, blob.data(), sizeof id);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    // The thread blocks NCCL's kernels may take (0: NCCL's choice): fewer leave more SMs to the
    // backward that the gradient reductions overlap. A measuring knob (bench/ddp_tuning.sh).
    if (const int64_t n = knob_int("LEANTRAIN_NCCL_MAX_CTAS"); n > 0) cfg.maxCTAs = int(n);
    // NCCL's CTA policy (1: efficiency, 2: zero), a measuring knob as the one above.
    if (const int64_t n = knob_int("LEANTRAIN_NCCL_CTA_POLICY"); n > 0) cfg.CTAPolicy = int(n);
    check(ncclCommInitRankConfig(&comm_, size_, id, rank_, &cfg), "ncclCommInitRank");
    wait_ready("ncclCommInitRank");
    watchdog_ = std::thread([this] { watch(); });
    // The watchdog calls into CUDA and NCCL, and a call of theirs may itself block on a dead
    // peer. This thread calls neither: when the watchdog has not come round for the timeout
    // (plus its own 5 s to abort), it ends the process.
    sentinel_ = std::thread([this] {
      while (!stop_.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        if (now_s() - heartbeat_.load() > timeout_ + 10) {
          std::fprintf(stderr, "leantrain: error: rank %d: the NCCL watchdog itself has been blocked for %d s: another rank died or hangs\n",
                       rank_, int(timeout_ + 10));
          std::fflush(stderr);
          _exit(1);
        }
      }
    });
  }
  ~NcclCommunicator() override {
    stop_.store(true);
    if (watchdog_.joinable()) watchdog_.join();
    if (sentinel_.joinable()) sentinel_.join();
    for (auto& p : pending_) cudaEventDestroy(p.event);
    peer_.reset();
    if (scratch_) cudaFree(scratch_);
    if (comm_) ncclCommDestroy(comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "nccl"; }

  void all_reduce(void* buf, int64_t count, DType dt, ReduceOp op, void* stream) override {
    const int64_t b = count * int64_t(dtype_size(dt));
    staged(buf, b, buf, b, stream, "all_reduce", [&](const void* s, void* r) {
      check(ncclAllReduce(s, r, size_t(count), nccl_type(dt), nccl_op(op), comm_, cuda(stream)), "all_reduce");
    });
  }
  // Large device buffers through the copy engines when every GPU maps every other
  // (peer_all_reduce.h). The first such call sets that up, collectively: every rank makes the
  // same calls in the same order, so every rank gets here at the same call.
  void all_reduce_beside_compute(void* buf, int64_t count, DType dt, ReduceOp op, void* stream) override {
    if (grouped_ == 0 && peer_reduce_takes(count * int64_t(dtype_size(dt)), dt) && on_device(buf)) {
      if (!peer_tried_) {
        peer_tried_ = true;
        peer_ = make_peer_all_reduce(*this, device_);
      }
      if (peer_) {
        peer_->run(buf, count, dt, op, stream);
        track(stream, "all_reduce");  // a dead peer leaves the stream waiting: the watchdog ends it
        return;
      }
    }
    all_reduce(buf, count, dt, op, stream);
  }
  void reduce_scatter(const void* send, void* recv, int64_t count, DType dt, ReduceOp op, void* stream) override {
    const int64_t b = count * int64_t(dtype_size(dt));
    staged(send, b * size_, recv, b, stream, "reduce_scatter", [&](const void* s, void* r) {
      check(ncclReduceScatter(s, r, size_t(count), nccl_type(dt), nccl_op(op), comm_, cuda(stream)), "reduce_scatter");
    });
  }
  void all_gather(const void* send, void* recv, int64_t count, DType dt, void* stream) override {
    const int64_t b = count * int64_t(dtype_size(dt));
    staged(send, b, recv, b * size_, stream, "all_gather", [&](const void* s, void* r) {
      check(ncclAllGather(s, r, size_t(count), nccl_type(dt), comm_, cuda(stream)), "all_gather");
    });
  }
  void reduce(void* buf, int64_t count, DType dt, ReduceOp op, int root, void* stream) override {
    const int64_t b = count * int64_t(dtype_size(dt));
    staged(buf, b, buf, b, stream, "reduce", [&](const void* s, void* r) {
      check(ncclReduce(s, r, size_t(count), nccl_type(dt), nccl_op(op), root, comm_, cuda(stream)), "reduce");
    });
  }
  void broadcast(void* buf, int64_t bytes, int root, void* stream) override {
    staged(buf, bytes, buf, bytes, stream, "broadcast", [&](const void* s, void* r) {
      check(ncclBroadcast(s, r, size_t(bytes), ncclUint8, root, comm_, cuda(stream)), "broadcast");
    });
  }
  void group_start() override {
    check(ncclGroupStart(), "group_start");
    ++grouped_;
  }
  void group_end() override {
    --grouped_;
    check(ncclGroupEnd(), "group_end");
    if (grouped_ == 0 && group_calls_) track(group_stream_, "grouped collectives");
    if (grouped_ == 0) group_calls_ = false;
  }
  void barrier() override {
    float* one = nullptr;
    check_cuda(cudaMalloc(&one, sizeof(float)), "cudaMalloc");
    check(ncclAllReduce(one, one, 1, ncclFloat32, ncclSum, comm_, nullptr), "barrier");
    cudaError_t e = cudaStreamSynchronize(nullptr);
    cudaFree(one);
    check_cuda(e, "barrier");
  }

 private:
  struct Pending {
    cudaEvent_t event;
    double started;
    const char* what;
  };
  static cudaStream_t cuda(void* s) { return static_cast<cudaStream_t>(s); }
  static bool on_device(const void* p) {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
  }
  // NCCL moves device memory only. Device buffers go as they are (enqueued, asynchronous); host
  // ones (the trainer's loss and norm, the config hash, a checkpoint's optimizer state) through
  // a scratch device buffer, copied in, reduced, waited for and copied out: rare and small.
  template <class F>
  void staged(const void* send, int64_t send_bytes, void* recv, int64_t recv_bytes, void* stream, const char* what, F run) {
    if (on_device(send) && on_device(recv)) {
      run(send, recv);
      if (grouped_ > 0) group_calls_ = true, group_stream_ = stream;  // enqueued at group_end
      else track(stream, what);
      return;
    }
    if (grouped_ > 0) fail(std::string("NCCL ") + what + " of host memory inside a group", "only device buffers can be grouped", "");
    const bool in_place = send == recv;
    const size_t need = size_t(in_place ? send_bytes : send_bytes + recv_bytes) + 1;
    // The per-step numbers (loss, norm) reuse one small buffer: a cudaFree would wait for the
    // whole device every step. Large ones (a checkpoint's state) get a buffer of their own.
    const bool small = need <= kScratchBytes;
    if (small && !scratch_) check_cuda(cudaMalloc(&scratch_, kScratchBytes), "cudaMalloc");
    char* d = scratch_;
    if (!small) check_cuda(cudaMalloc(&d, need), "cudaMalloc");
    char* dr = in_place ? d : d + send_bytes;
    check_cuda(cudaMemcpyAsync(d, send, size_t(send_bytes), cudaMemcpyHostToDevice, cuda(stream)), "cudaMemcpyAsync");
    run(d, dr);
    track(stream, what);  // a hung collective: the watchdog ends the process while this waits
    check_cuda(cudaMemcpyAsync(recv, dr, size_t(recv_bytes), cudaMemcpyDeviceToHost, cuda(stream)), "cudaMemcpyAsync");
    check_cuda(cudaStreamSynchronize(cuda(stream)), what);
    if (!small) check_cuda(cudaFree(d), "cudaFree");
  }
  void check(ncclResult_t r, const char* what) {
    if (r == ncclInProgress) return wait_ready(what);  // non-blocking: enqueued once the comm says so
    if (r == ncclSuccess) return;
    fail(std::string("NCCL ") + what, ncclGetErrorString(r), "check that every rank is alive and runs the same command");
  }
  void wait_ready(const char* what) {
    const double t0 = now_s();
    ncclResult_t st = ncclInProgress;
    while (st == ncclInProgress) {
      check(ncclCommGetAsyncError(comm_, &st), what);
      if (now_s() - t0 > timeout_) fail(std::string("NCCL ") + what, "timed out waiting for the other ranks", "");
    }
    check(st, what);
  }
  // An event after each collective: its age is how long the collective has been unfinished.
  void track(void* stream, const char* what) {
    cudaEvent_t e;
    check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cudaEventRecord(e, cuda(stream)), "cudaEventRecord");
    std::lock_guard<std::mutex> l(m_);
    pending_.push_back({e, now_s(), what});
  }
  void watch() {
    // A thread's first CUDA call binds it to device 0 unless told otherwise: on every rank but
    // rank 0 that would create a second CUDA context (hundreds of MiB) on rank 0's GPU.
    if (cudaSetDevice(device_) != cudaSuccess) (void)cudaGetLastError();
    while (!stop_.load()) {
      heartbeat_.store(now_s());
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      ncclResult_t st = ncclSuccess;
      ncclCommGetAsyncError(comm_, &st);
      const char* late = nullptr;
      {
        std::lock_guard<std::mutex> l(m_);
        while (!pending_.empty() && cudaEventQuery(pending_.front().event) == cudaSuccess) {
          cudaEventDestroy(pending_.front().event);
          pending_.pop_front();
        }
        if (!pending_.empty() && now_s() - pending_.front().started > timeout_) late = pending_.front().what;
      }
      if (st != ncclSuccess && st != ncclInProgress)
        die(std::string("NCCL reported ") + ncclGetErrorString(st) + ": another rank died or the link failed");
      if (late)
        die(std::string("NCCL ") + late + " did not finish in " + std::to_string(int(timeout_)) +
            " s: another rank died or hangs (--dist-timeout sets the limit)");
    }
  }
  [[noreturn]] void die(const std::string& why) {
    std::fprintf(stderr, "leantrain: error: rank %d: %s\n", rank_, why.c_str());
    std::fflush(stderr);
    // Aborting a communicator whose peer died can itself wait on that peer: the process ends
    // within 5 s either way (the driver releases what the abort did not).
    std::thread([] {
      std::this_thread::sleep_for(std::chrono::seconds(5));
      _exit(1);
    }).detach();
    ncclCommAbort(comm_);
    _exit(1);
  }

  static constexpr size_t kScratchBytes = size_t(64) << 10;
  char* scratch_ = nullptr;  // device staging of small host buffers (outside the allocator)
  int rank_, size_, device_;
  int grouped_ = 0;
  bool group_calls_ = false;
  void* group_stream_ = nullptr;
  double timeout_;
  ncclComm_t comm_ = nullptr;
  std::mutex m_;
  std::deque<Pending> pending_;
  std::atomic<bool> stop_{false};
  std::atomic<double> heartbeat_{now_s()};  // the watchdog's last round
  std::thread watchdog_, sentinel_;
  bool peer_tried_ = false;
  std::unique_ptr<PeerAllReduce> peer_;  // the copy-engine all-reduce, when every rank has one
};

}  // namespace

bool nccl_built() { return true; }
std::unique_ptr<Communicator> make_nccl_communicator(const LaunchInfo& info, int device_index) {
  return std::make_unique<NcclCommunicator>(info, device_index);
}

}  // namespace lt::dist
