#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/meta/meta_backend.h"
#include "leantrain/error.h"

namespace lt {

Backend& cuda_backend(int device_index);  // src/backend/cuda (or its stub)

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
