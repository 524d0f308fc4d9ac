#include "backend/moe_kernels.h"

#include "backend/dry_compute.h"
#include "leantrain/error.h"

namespace lt {

MoeKernels& moe_kernels_for(Device d) {
  static CpuMoeKernels cpu;
  static MetaMoeKernels meta;
  if (DryCompute::active()) return meta;  // Note [Dry compute]
  switch (d.type) {
    case DeviceType::CPU: return cpu;
    case DeviceType::Meta: return meta;
    case DeviceType::CUDA: return cuda_moe_kernels(d.index);
  }
  LT_ASSERT(false);
}

}  // namespace lt
