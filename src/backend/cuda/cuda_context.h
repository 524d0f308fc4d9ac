// Host-side CUDA plumbing shared by the backend's .cpp and .cu files (plain C++: g++ compiles
// the .cpp files): checks that turn CUDA/cuBLAS failures into lt::Error, the per-device state
// (context, compute and copy streams, cuBLASLt handle, memory measured at start-up) and a device
// guard.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace lt::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t e, const char* what, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t s, const char* what, const char* file, int line);
// After a kernel launch: a launch error names the kernel. With LEANTRAIN_CUDA_SYNC=1 in the
// environment it also synchronises, so an asynchronous fault is reported at its kernel.
void check_launch(const char* kernel, const char* file, int line);

// Created on first use of a device, never destroyed (tensors may outlive main).
struct DeviceState {
  int index = 0;
  cudaStream_t stream = nullptr;       // the compute stream (kComputeStream): every op by default
  cudaStream_t copy_stream = nullptr;  // kCopyStream: copies that overlap compute (StreamGuard)
  cudaStream_t comm_stream = nullptr;  // kCommStream: NCCL collectives that overlap compute
  cudaStream_t optim_stream = nullptr;  // kOptimStream: a fused step's updates beside the backward
  cublasLtHandle_t lt = nullptr;
  int sm_count = 0;
  int64_t total_bytes = 0;
  int64_t context_bytes = 0;  // in use right after the context was created
  int64_t library_bytes = 0;  // growth while creating the streams and the cuBLASLt handle
};
DeviceState& device_state(int device);
int current_device();
// Fails with a clear lt::Error when `device` does not exist or CUDA is unavailable.
void check_device(int device);

// The stream kernels and copies are enqueued on: the current device's stream numbered by this
// thread's StreamGuard (memory/streams.h), the compute stream unless set. Both streams are
// blocking streams: work on the legacy default stream still orders with them. Work on the copy
// stream must not use cuBLASLt (its workspace belongs to the compute stream).
cudaStream_t current_stream();
// Stream number `stream` (kComputeStream, kCopyStream) of `device`; fails for other numbers.
cudaStream_t stream_handle(int device, int stream);

// Makes `device` current for the scope, restoring the previous device afterwards.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = -1;
};

// gemm.cu: bytes of the cuBLASLt workspace held for `device` (0 before the first GEMM).
int64_t cublaslt_workspace_bytes(int device);
// gemm.cu: the cuBLASLt workspace of `device` as scratch for a kernel between GEMMs (its size in
// *bytes), or nullptr when none is held. Only work on the compute stream may use it: the GEMMs
// that own it run there, so stream order keeps the two apart. Nothing is allocated.
void* cublaslt_workspace_held(int device, int64_t* bytes);
// gemm.cu: cublaslt_workspace_held for a caller on the current stream: the workspace when that
// stream is `device`'s compute stream, else nullptr (*bytes = 0).
void* cublaslt_workspace_borrow(int device, int64_t* bytes);

}  // namespace lt::cuda

#define LT_CUDA_CHECK(expr)                                                             \
  do {                                                                                  \
    cudaError_t e_ = (expr);                                                            \
    if (e_ != cudaSuccess) ::lt::cuda::throw_cuda_error(e_, #expr, __FILE__, __LINE__); \
  } while (0)

#define LT_CUBLAS_CHECK(expr)                                                                      \
  do {                                                                                             \
    cublasStatus_t s_ = (expr);                                                                    \
    if (s_ != CUBLAS_STATUS_SUCCESS) ::lt::cuda::throw_cublas_error(s_, #expr, __FILE__, __LINE__); \
  } while (0)

// After every launch: a launch-configuration error becomes an lt::Error naming the kernel.
#define LT_CUDA_LAUNCH_CHECK(name) ::lt::cuda::check_launch((name), __FILE__, __LINE__)
