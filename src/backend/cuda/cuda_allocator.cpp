// The CUDA caching allocator: the policy of memory/caching_policy.h over segments from
// cudaMalloc. A cudaMalloc that fails for lack of memory reports "no room" to the policy,
// which releases cached segments, retries once, then raises lt::OutOfMemoryError with the
// per-category breakdown (never a raw CUDA error).
#include "backend/cuda/cuda_context.h"
#include "leantrain/error.h"
#include "memory/caching_policy.h"

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

}  // namespace

std::unique_ptr<Allocator> make_cuda_allocator(int device_index) {
  cuda::device_state(device_index);  // context first, so its memory is measured on its own
  return std::make_unique<CachingAllocator>(Device::cuda(device_index),
                                            std::make_unique<CudaSegmentSource>(device_index));
}

}  // namespace lt
