// Stand-ins used when leantrain is built without the CUDA backend.
#include "backend/backend.h"
#include "leantrain/error.h"

namespace lt {

[[noreturn]] static void no_cuda() {
  fail("CUDA is not available", "this leantrain was built without the CUDA backend (nvcc was not found)",
       "use --device cpu, or rebuild with the CUDA toolkit installed and -DLEANTRAIN_CUDA=ON");
}

bool cuda_available() { return false; }
int cuda_device_count() { return 0; }
Backend& cuda_backend(int) { no_cuda(); }
std::unique_ptr<Allocator> make_cuda_allocator(int) { no_cuda(); }

}  // namespace lt
