// The CUDA backend (sm_90). Each op family lives in its own .cu file; launchers check shapes
// and the last CUDA error. Outputs come preallocated from the op front-ends (through the
// caching allocator), so kernels never allocate, except cuBLASLt workspace, which is a
// Workspace-category tensor held by the backend.
#pragma once
#include "backend/backend.h"

namespace lt {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device_index) : device_index_(device_index) {}
  int device_index() const { return device_index_; }
  const char* name() const override { return "cuda"; }
  void synchronize() override;
  // cuda_runtime.cpp: events on the device's streams (cudaEvent_t)
  void* create_event() override;
  void destroy_event(void* event) noexcept override;
  void record_event(void* event) override;
  bool event_done(void* event) override;
  void wait_event(void* event) override;
  void stream_wait_event(void* event) override;
  void* native_stream() override;
  void copy_from_host_async(const Tensor& dst, const void* src) override;  // copy.cu
  void copy_to_host_async(void* dst, const Tensor& src) override;          // copy.cu
  // Every op of backend_ops.def, one file per group: copy.cu, elementwise.cu, reduce.cu,
  // gemm.cu (cuBLASLt), norm.cu, attention.cu (flash-style, no TxT matrix), embedding.cu,
  // loss.cu, optim.cu and optim_lean.cu (one fused multi-tensor launch per step).
#define LT_BACKEND_OP(group, ret, op, params, args) ret op params override;
#include "backend/backend_ops.def"

 private:
  int device_index_;
};

}  // namespace lt
