// GPU memory that lives outside leantrain's caching allocator (the CUDA context, library
// handles), measured with cudaMemGetInfo when a device is first used, so reports can show it
// on its own line next to the allocator's categories. CPU-only builds have stand-ins that
// report "CUDA unavailable".
#pragma once
#include <cstdint>
#include <string>

namespace lt {

// cuBLASLt workspace held by the CUDA backend per device, allocated from the caching allocator
// (category `workspace`) at the first GEMM on that device. A meta dry-run that predicts a
// GPU run allocates the same bytes at the same point. kCublasWorkspaceBytes is the default;
// --gemm-workspace sets this process's size (0: none, and cuBLASLt picks algorithms that need
// none) before a run or a plan builds its model.
inline constexpr int64_t kCublasWorkspaceBytes = int64_t(32) << 20;
void set_gemm_workspace_bytes(int64_t bytes);
int64_t gemm_workspace_bytes();

struct CudaMemoryInfo {
  int device = 0;
  std::string name;             // e.g. "NVIDIA H100 80GB HBM3"
  int64_t total_bytes = 0;
  int64_t free_bytes = 0;       // now
  int64_t context_bytes = 0;    // in use right after context creation (other processes' memory included)
  int64_t library_bytes = 0;    // growth from creating the compute stream and the cuBLASLt handle
  int64_t reserved_bytes = 0;   // held by leantrain's caching allocator now
  int64_t workspace_bytes = 0;  // cuBLASLt workspace, part of reserved_bytes
};

// Initialises the device if needed. Throws lt::Error when CUDA is unavailable.
CudaMemoryInfo cuda_memory_info(int device = 0);
// One line: "cuda:0 NVIDIA H100 80GB HBM3: context 510 MiB, cuBLASLt 8 MiB, ...".
std::string cuda_memory_summary(int device = 0);

// TF32 tensor cores for f32 GEMMs: off by default, so f32 results match the CPU to ~1e-5.
void cuda_set_allow_tf32(bool on);
bool cuda_allow_tf32();

// Opens (true) or closes (false) a profiler's capture range (cudaProfilerStart/Stop), so that
// `ncu --profile-from-start off` or `nsys --capture-range=cudaProfilerApi` records only the
// steps a benchmark times, not the model's initialisation. Without a profiler attached it does
// nothing; without the CUDA backend it does nothing either.
void cuda_profiler_range(bool on);

}  // namespace lt
