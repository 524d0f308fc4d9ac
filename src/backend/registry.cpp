#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/dry_compute.h"
#include "backend/meta/meta_backend.h"
#include "leantrain/error.h"

namespace lt {

Backend& cuda_backend(int device_index);  // src/backend/cuda (or its stub)

namespace {
thread_local bool t_dry = false;
}  // namespace

DryCompute::DryCompute(bool dry) : prev_(t_dry) { t_dry = dry; }
DryCompute::~DryCompute() { t_dry = prev_; }
bool DryCompute::active() { return t_dry; }

Backend& backend_for(Device d) {
  static CpuBackend cpu;
  static MetaBackend meta;
  if (t_dry) return meta;  // Note [Dry compute]
  switch (d.type) {
    case DeviceType::CPU: return cpu;
    case DeviceType::Meta: return meta;
    case DeviceType::CUDA: return cuda_backend(d.index);
  }
  LT_ASSERT(false);
}

}  // namespace lt
