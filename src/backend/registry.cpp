#include <new>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/meta/meta_backend.h"
#include "leantrain/error.h"

namespace lt {

Backend& cuda_backend(int device_index);  // src/backend/cuda (or its stub)

// cpu and meta: ordinary memory (copies from it are synchronous).
void* Backend::alloc_staging(int64_t nbytes) {
  return ::operator new(size_t(nbytes > 0 ? nbytes : 1), std::align_val_t{64}, std::nothrow);
}
void Backend::free_staging(void* p) noexcept {
  if (p) ::operator delete(p, std::align_val_t{64});
}

Backend& backend_for(Device d) {
  static CpuBackend cpu;
  static MetaBackend meta;
  switch (d.type) {
    case DeviceType::CPU: return cpu;
    case DeviceType::Meta: return meta;
    case DeviceType::CUDA: return cuda_backend(d.index);
  }
  LT_ASSERT(false);
}

}  // namespace lt
