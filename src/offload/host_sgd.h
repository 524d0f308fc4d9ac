// SGD's CPU step for offloaded state (as host_adamw.h for AdamW): f32 master weights and, with
// momentum, an f32 momentum buffer in host memory; a bf16/f16/f32 gradient; the updated master
// and optionally its 16-bit copy. Bitwise equal to the CPU reference (cpu_optim.cpp sgd_one<float,
// float> on the widened gradient, then float_to_bf16 / float_to_half) on any thread count and path.
#pragma once
#include <cstdint>

#include "backend/backend.h"
#include "offload/host_adamw.h"

namespace lt::offload {

struct HostSgdSpan {
  float* master = nullptr;
  float* momentum_buf = nullptr;  // null: plain SGD (args.momentum is then not used)
  const void* grad = nullptr;
  DType grad_dtype = DType::F32;
  void* param16 = nullptr;
  DType param16_dtype = DType::BF16;
  int64_t n = 0;
};

// args.sr must be empty (refused otherwise), as for host_adamw_step.
void host_sgd_step(const HostSgdSpan& s, const SgdArgs& args, int threads, SimdPath path);

}  // namespace lt::offload
