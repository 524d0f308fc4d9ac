// Device discovery, per-device state and error reporting for the CUDA backend.
// cuda_available() must stay silent and safe on a machine without a driver or GPU: this binary
// also runs CPU-only in CI. Nothing here runs in a static initialiser.
#include <array>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include <cuda_profiler_api.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_context.h"
#include "core/knobs.h"
#include "leantrain/cuda_info.h"
#include "leantrain/error.h"
#include "leantrain/memory.h"
#include "memory/streams.h"

namespace lt {

namespace {

constexpr int kMaxDevices = 64;

std::string basename_of(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}

std::string mib(int64_t b) { return std::to_string((b + (1 << 19)) >> 20) + " MiB"; }

bool sync_after_launch() {
  static const bool on = knob_on("LEANTRAIN_CUDA_SYNC");
  return on;
}

}  // namespace

int cuda_device_count() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();  // no driver / no GPU: not an error for us, just no CUDA
      return 0;
    }
    return n < 0 ? 0 : n;
  }();
  return count;
}

bool cuda_available() { return cuda_device_count() > 0; }

namespace cuda {

[[noreturn]] void throw_cuda_error(cudaError_t e, const char* what, const char* file, int line) {
  (void)cudaGetLastError();  // clear a non-sticky error so that later calls do not report it again
  const std::string why = std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ") at " +
                          basename_of(file) + ":" + std::to_string(line);
  if (e == cudaErrorMemoryAllocation)
    throw OutOfMemoryError("out of GPU memory outside the caching allocator in " + std::string(what), why,
                           "the CUDA context and libraries need memory too: leave headroom in --budget");
  std::string fix = "rerun with LEANTRAIN_CUDA_SYNC=1 (or under compute-sanitizer) to locate the failing kernel";
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver || e == cudaErrorInvalidDevice)
    fix = "check the GPU and driver (nvidia-smi), or use --device cpu";
  throw Error("CUDA error in " + std::string(what), why, fix);
}

[[noreturn]] void throw_cublas_error(cublasStatus_t s, const char* what, const char* file, int line) {
  (void)cudaGetLastError();
  throw Error("cuBLAS error in " + std::string(what),
              std::string(cublasLtGetStatusName(s)) + " (" + cublasLtGetStatusString(s) + ") at " +
                  basename_of(file) + ":" + std::to_string(line),
              "this is a bug in leantrain's GEMM setup (shapes, alignment or dtypes); please report it");
}

void check_launch(const char* kernel, const char* file, int line) {
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess && sync_after_launch()) e = cudaStreamSynchronize(current_stream());
  if (e != cudaSuccess) throw_cuda_error(e, (std::string("kernel ") + kernel).c_str(), file, line);
}

int current_device() {
  int d = 0;
  LT_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

void check_device(int device) {
  const int n = cuda_device_count();
  LT_CHECK(n > 0, "CUDA is not available", "no CUDA driver or GPU was found on this machine",
           "use --device cpu, or run on a machine with an NVIDIA GPU and driver");
  LT_CHECK(device >= 0 && device < n && device < kMaxDevices, "no GPU cuda:" + std::to_string(device),
           "this machine has " + std::to_string(n) + " GPU(s)", "use cuda:0 .. cuda:" + std::to_string(n - 1));
}

DeviceGuard::DeviceGuard(int device) {
  LT_CUDA_CHECK(cudaGetDevice(&prev_));
  if (prev_ != device) LT_CUDA_CHECK(cudaSetDevice(device));
  else prev_ = -1;  // nothing to restore
}

DeviceGuard::~DeviceGuard() {
  if (prev_ >= 0) (void)cudaSetDevice(prev_);  // destructors must not throw
}

DeviceState& device_state(int device) {
  static std::array<DeviceState*, kMaxDevices> states{};
  static std::array<std::once_flag, kMaxDevices> once;
  check_device(device);
  std::call_once(once[size_t(device)], [device] {
    DeviceGuard g(device);
    auto* s = new DeviceState;  // never destroyed: kernels and frees may run until exit
    s->index = device;
    LT_CUDA_CHECK(cudaFree(nullptr));  // creates the primary context now, so it can be measured
    size_t free0 = 0, total = 0;
    LT_CUDA_CHECK(cudaMemGetInfo(&free0, &total));
    s->total_bytes = int64_t(total);
    s->context_bytes = int64_t(total - free0);
    LT_CUDA_CHECK(cudaDeviceGetAttribute(&s->sm_count, cudaDevAttrMultiProcessorCount, device));
    // LEANTRAIN_OPT_STREAM=2: the compute stream at the device's highest priority, so that the
    // block scheduler starts its blocks ahead of the optimizer stream's queued ones (which then
    // fill the SMs the backward leaves idle). Default priority is the lowest.
    if (knob_int("LEANTRAIN_OPT_STREAM") == 2) {
      int least = 0, greatest = 0;
      LT_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
      LT_CUDA_CHECK(cudaStreamCreateWithPriority(&s->stream, cudaStreamDefault, greatest));
    } else {
      LT_CUDA_CHECK(cudaStreamCreateWithFlags(&s->stream, cudaStreamDefault));
    }
    LT_CUDA_CHECK(cudaStreamCreateWithFlags(&s->optim_stream, cudaStreamDefault));
    LT_CUDA_CHECK(cudaStreamCreateWithFlags(&s->copy_stream, cudaStreamDefault));
    // The communication stream may run at the device's highest priority, so that the block
    // scheduler starts a collective's blocks ahead of queued compute blocks (a measuring knob,
    // LEANTRAIN_COMM_PRIORITY=1; bench/ddp_overlap.sh).
    if (knob_on("LEANTRAIN_COMM_PRIORITY")) {
      int least = 0, greatest = 0;
      LT_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
      LT_CUDA_CHECK(cudaStreamCreateWithPriority(&s->comm_stream, cudaStreamDefault, greatest));
    } else {
      LT_CUDA_CHECK(cudaStreamCreateWithFlags(&s->comm_stream, cudaStreamDefault));
    }
    LT_CUBLAS_CHECK(cublasLtCreate(&s->lt));
    size_t free1 = 0;
    LT_CUDA_CHECK(cudaMemGetInfo(&free1, &total));
    s->library_bytes = int64_t(free0) - int64_t(free1);
    states[size_t(device)] = s;
  });
  return *states[size_t(device)];
}

cudaStream_t stream_handle(int device, int stream) {
  DeviceState& s = device_state(device);
  if (stream == kComputeStream) return s.stream;
  if (stream == kCopyStream) return s.copy_stream;
  if (stream == kCommStream) return s.comm_stream;
  if (stream == kOptimStream) return s.optim_stream;
  fail("no stream " + std::to_string(stream) + " on cuda:" + std::to_string(device),
       "the CUDA backend creates " + std::to_string(kNumDeviceStreams) + " streams per device (compute, copy, comm, optim)",
       "use kComputeStream, kCopyStream, kCommStream or kOptimStream in the StreamGuard");
}

cudaStream_t current_stream() { return stream_handle(current_device(), current_stream_id()); }

}  // namespace cuda

// The backend object of each device. Fetching it makes the device current for this thread,
// so that kernels, streams and cuBLASLt calls of the op that follows run on it.
Backend& cuda_backend(int device_index) {
  static std::array<CudaBackend*, kMaxDevices> backends{};
  static std::mutex mu;
  cuda::device_state(device_index);
  int cur = -1;
  LT_CUDA_CHECK(cudaGetDevice(&cur));
  if (cur != device_index) LT_CUDA_CHECK(cudaSetDevice(device_index));
  std::lock_guard<std::mutex> g(mu);
  CudaBackend*& b = backends[size_t(device_index)];
  if (!b) b = new CudaBackend(device_index);  // never destroyed, like the allocators
  return *b;
}

void CudaBackend::synchronize() {
  cuda::DeviceGuard g(device_index_);
  const cuda::DeviceState& s = cuda::device_state(device_index_);
  LT_CUDA_CHECK(cudaStreamSynchronize(s.stream));
  LT_CUDA_CHECK(cudaStreamSynchronize(s.copy_stream));
  LT_CUDA_CHECK(cudaStreamSynchronize(s.comm_stream));
  LT_CUDA_CHECK(cudaStreamSynchronize(s.optim_stream));
}

void* CudaBackend::native_stream() {
  cuda::DeviceGuard g(device_index_);
  return cuda::current_stream();
}

void* CudaBackend::create_event() {
  cuda::DeviceGuard g(device_index_);
  cudaEvent_t ev = nullptr;
  LT_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  return ev;
}

void CudaBackend::destroy_event(void* event) noexcept {
  if (event) (void)cudaEventDestroy(static_cast<cudaEvent_t>(event));
}

void CudaBackend::record_event(void* event) {
  cuda::DeviceGuard g(device_index_);
  LT_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), cuda::current_stream()));
}

bool CudaBackend::event_done(void* event) {
  cuda::DeviceGuard g(device_index_);
  const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(event));
  if (e == cudaSuccess) return true;
  if (e == cudaErrorNotReady) {
    (void)cudaGetLastError();  // "not yet" must not surface at the next kernel's launch check
    return false;
  }
  cuda::throw_cuda_error(e, "cudaEventQuery", __FILE__, __LINE__);
}

void CudaBackend::wait_event(void* event) {
  cuda::DeviceGuard g(device_index_);
  LT_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
}

void CudaBackend::stream_wait_event(void* event) {
  cuda::DeviceGuard g(device_index_);
  LT_CUDA_CHECK(cudaStreamWaitEvent(cuda::current_stream(), static_cast<cudaEvent_t>(event), 0));
}

CudaMemoryInfo cuda_memory_info(int device) {
  cuda::DeviceState& s = cuda::device_state(device);
  cuda::DeviceGuard g(device);
  CudaMemoryInfo info;
  info.device = device;
  cudaDeviceProp prop{};
  LT_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  info.name = prop.name;
  size_t free = 0, total = 0;
  LT_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  info.total_bytes = int64_t(total);
  info.free_bytes = int64_t(free);
  info.context_bytes = s.context_bytes;
  info.library_bytes = s.library_bytes;
  info.reserved_bytes = allocator_for(Device::cuda(device)).stats().reserved_bytes.current;
  info.workspace_bytes = cuda::cublaslt_workspace_bytes(device);
  return info;
}

std::string cuda_memory_summary(int device) {
  const CudaMemoryInfo m = cuda_memory_info(device);
  return "cuda:" + std::to_string(m.device) + " " + m.name + ": " + mib(m.total_bytes) + " total, CUDA context " +
         mib(m.context_bytes) + ", streams + cuBLASLt handle " + mib(m.library_bytes) +
         ", caching allocator reserved " + mib(m.reserved_bytes) + " (cuBLASLt workspace " +
         mib(m.workspace_bytes) + " of it), " + mib(m.free_bytes) + " free";
}

void cuda_profiler_range(bool on) {
  if (!cuda_available()) return;
  LT_CUDA_CHECK(on ? cudaProfilerStart() : cudaProfilerStop());
}

}  // namespace lt
