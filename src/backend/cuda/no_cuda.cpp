// Stand-ins used when leantrain is built without the CUDA backend.
#include "backend/backend.h"
#include "backend/moe_kernels.h"
#include "leantrain/cuda_info.h"
#include "leantrain/error.h"

namespace lt {

[[noreturn]] static void no_cuda() {
  fail("CUDA is not available", "this leantrain was built without the CUDA backend (nvcc was not found)",
       "use --device cpu, or rebuild with the CUDA toolkit installed and -DLEANTRAIN_CUDA=ON");
}

bool cuda_available() { return false; }
int cuda_device_count() { return 0; }
Backend& cuda_backend(int) { no_cuda(); }
MoeKernels& cuda_moe_kernels(int) { no_cuda(); }
std::unique_ptr<Allocator> make_cuda_allocator(int) { no_cuda(); }
std::unique_ptr<Allocator> make_cuda_pinned_allocator(int) { no_cuda(); }
CudaMemoryInfo cuda_memory_info(int) { no_cuda(); }
std::string cuda_memory_summary(int) { return "CUDA unavailable (built without the CUDA backend)"; }
void cuda_set_allow_tf32(bool) {}
bool cuda_allow_tf32() { return false; }
void cuda_profiler_range(bool) {}

}  // namespace lt
