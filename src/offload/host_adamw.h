// The CPU optimizer step of `--offload optimizer` (issue #14): AdamW over f32 master weights and
// f32 moments in host memory, reading a bf16/f16/f32 gradient and writing the updated f32 master
// and, optionally, its 16-bit copy (to nearest even) into a staging buffer for the H2D copy.
//
// The update is bitwise equal to the CPU reference (backend/cpu/cpu_optim.cpp adamw_one<float,float>
// on the gradient widened to f32, then float_to_bf16 / float_to_half of the new master): the same
// f32 operations in the same order, one rounding each (no FMA), in AVX2 or AVX-512 registers.
// Threads take contiguous chunks; the update is element-wise, so the bits do not depend on the
// thread count or the SIMD path.
#pragma once
#include <cstdint>

#include "backend/backend.h"
#include "leantrain/dtype.h"

namespace lt::offload {

enum class SimdPath { Scalar, Avx2, Avx512 };
const char* simd_path_name(SimdPath p);
bool simd_path_available(SimdPath p);  // Scalar and Avx2 always (the library needs x86-64-v3)
SimdPath best_simd_path();             // Avx512 where the CPU has AVX512F+BW, else Avx2

// One contiguous run of elements. grad is bf16, f16 or f32 (grad_dtype); param16, when not null,
// receives the updated master rounded to param16_dtype (bf16 or f16).
struct HostAdamWSpan {
  float* master = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  const void* grad = nullptr;
  DType grad_dtype = DType::F32;
  void* param16 = nullptr;
  DType param16_dtype = DType::BF16;
  int64_t n = 0;
};

// One AdamW step of `s` on `threads` threads (1 = the calling thread only). args.sr must be
// empty: stochastic rounding of the 16-bit copy is not supported here (refused).
void host_adamw_step(const HostAdamWSpan& s, const AdamWArgs& args, int threads, SimdPath path);

}  // namespace lt::offload
