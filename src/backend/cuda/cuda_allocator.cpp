// The CUDA caching allocator: the policy of memory/caching_policy.h over segments from
// cudaMalloc. A cudaMalloc that fails for lack of memory reports "no room" to the policy,
// which releases cached segments, retries once, then raises lt::OutOfMemoryError with the
// per-category breakdown (never a raw CUDA error). Blocks other streams used wait on real
// events, decided by program order as on meta (Note [Cross-stream reuse]). And the pinned-host
// account: one cudaHostAlloc per buffer.
#include <vector>

#include "backend/cuda/cuda_context.h"
#include "leantrain/error.h"
#include "memory/caching_policy.h"
#include "memory/host_allocators.h"

namespace lt {

namespace {

class CudaSegmentSource final : public SegmentSource {
 public:
  explicit CudaSegmentSource(int device) : device_(device) {}

  bool map(int64_t bytes, void*& ptr, uint64_t& addr) override {
    cuda::DeviceGuard g(device_);
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, size_t(bytes));
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // not sticky: clear it so the next launch check does not see it
      return false;
    }
    LT_CUDA_CHECK(e);
    ptr = p;
    addr = reinterpret_cast<uint64_t>(p);
    return true;
  }

  void unmap(void* ptr, uint64_t, int64_t) override {
    cuda::DeviceGuard g(device_);
    // cudaFree waits for the device: no kernel still uses a block of this segment.
    LT_CUDA_CHECK(cudaFree(ptr));
  }

 private:
  int device_;
};

// The program-order decisions of OrderedStreamEvents, with a cudaEvent_t recorded beside each
// mark. It is never queried: it is waited for only where the policy needs the block (rule 2).
class CudaStreamEvents final : public OrderedStreamEvents {
 public:
  CudaStreamEvents(StreamOrder& order, int device) : OrderedStreamEvents(order), device_(device) {}
  ~CudaStreamEvents() override {
    for (auto& [id, ev] : live_) (void)cudaEventDestroy(ev);
    for (cudaEvent_t ev : spare_) (void)cudaEventDestroy(ev);
  }

  uint64_t record(int stream) override {
    cuda::DeviceGuard g(device_);
    cudaEvent_t ev = nullptr;
    if (!spare_.empty()) {
      ev = spare_.back();
      spare_.pop_back();
    } else {
      LT_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    }
    LT_CUDA_CHECK(cudaEventRecord(ev, cuda::stream_handle(device_, stream)));
    const uint64_t id = OrderedStreamEvents::record(stream);
    live_[id] = ev;
    return id;
  }

  void synchronize(uint64_t event) override {
    cuda::DeviceGuard g(device_);
    LT_CUDA_CHECK(cudaEventSynchronize(live_.at(event)));
  }

  void release(uint64_t event) override {
    OrderedStreamEvents::release(event);
    auto it = live_.find(event);
    if (it == live_.end()) return;
    spare_.push_back(it->second);  // a recorded event may be re-recorded: no need to wait for it
    live_.erase(it);
  }

 private:
  int device_;
  std::map<uint64_t, cudaEvent_t> live_;
  std::vector<cudaEvent_t> spare_;
};

// Page-locked host memory. Pinned memory is limited (it cannot be swapped out), so a refusal is
// "no room", never an error: the caller falls back to pageable memory.
class CudaPinnedSource final : public SegmentSource {
 public:
  explicit CudaPinnedSource(int device) : device_(device) {}

  bool map(int64_t bytes, void*& ptr, uint64_t& addr) override {
    cuda::DeviceGuard g(device_);
    void* p = nullptr;
    if (cudaHostAlloc(&p, size_t(bytes), cudaHostAllocPortable) != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky: clear it so that the next launch check does not see it
      return false;
    }
    ptr = p;
    addr = reinterpret_cast<uint64_t>(p);
    return true;
  }

  void unmap(void* ptr, uint64_t, int64_t) override {
    (void)cudaFreeHost(ptr);  // the owner has waited for every copy that used it
  }

 private:
  int device_;
};

}  // namespace

std::unique_ptr<Allocator> make_cuda_allocator(int device_index) {
  cuda::device_state(device_index);  // context first, so its memory is measured on its own
  auto a = std::make_unique<CachingAllocator>(Device::cuda(device_index),
                                              std::make_unique<CudaSegmentSource>(device_index));
  a->set_stream_events(std::make_unique<CudaStreamEvents>(a->stream_order(), device_index));
  return a;
}

std::unique_ptr<Allocator> make_cuda_pinned_allocator(int device_index) {
  cuda::device_state(device_index);
  return std::make_unique<PinnedHostAllocator>(Device::cuda(device_index),
                                               std::make_unique<CudaPinnedSource>(device_index));
}

}  // namespace lt
