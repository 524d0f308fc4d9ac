// Lion's CPU step for offloaded state (as host_adamw.h for AdamW): f32 master weights and f32
// momentum in host memory, a bf16/f16/f32 gradient, the updated master and optionally its
// 16-bit copy; bitwise equal to the CPU reference (cpu_optim_lean.cpp lion_one<float,float> on the
// widened gradient, then float_to_bf16 / float_to_half), on any thread count and SIMD path.
#pragma once
#include <cstdint>

#include "backend/backend.h"
#include "offload/host_adamw.h"

namespace lt::offload {

struct HostLionSpan {
  float* master = nullptr;
  float* exp_avg = nullptr;
  const void* grad = nullptr;
  DType grad_dtype = DType::F32;
  void* param16 = nullptr;
  DType param16_dtype = DType::BF16;
  int64_t n = 0;
};

// args.sr must be empty (refused otherwise), as for host_adamw_step.
void host_lion_step(const HostLionSpan& s, const LionArgs& args, int threads, SimdPath path);

}  // namespace lt::offload
