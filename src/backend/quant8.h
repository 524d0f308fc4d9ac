// 8-bit block-wise quantisation of optimizer states, shared by the CPU and CUDA kernels so both
// pick the same code for the same value. A state of n elements is split into blocks of
// kQuantBlock; each block keeps one f32 absmax and one u8 code per element, with
// value = map[code] * absmax. Requantising divides by the block's new absmax (so every value
// lands in [-1, 1]) and takes the nearest entry of the sorted 256-entry map.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define LT_Q8_HD __host__ __device__ __forceinline__
#else
#define LT_Q8_HD inline
#endif

namespace lt {

inline constexpr int64_t kQuantBlock = 256;
inline constexpr int kQuantCodes = 256;

LT_Q8_HD int64_t quant_blocks(int64_t n) { return (n + kQuantBlock - 1) / kQuantBlock; }

// Index of the entry of `map` (256 floats, ascending) nearest to x; ties go to the upper entry.
// A branch-free lower bound in 8 fixed steps (warp-uniform on the GPU): i = #entries < x.
// NaN compares false everywhere and yields code 0.
LT_Q8_HD uint8_t quantize_nearest(const float* map, float x) {
  int i = 0;
  for (int step = kQuantCodes / 2; step > 0; step >>= 1)
    if (map[i + step - 1] < x) i += step;
  if (i == 0) return 0;
  if (i == kQuantCodes) return uint8_t(kQuantCodes - 1);
  return uint8_t((map[i] - x) <= (x - map[i - 1]) ? i : i - 1);
}

// x / absmax, with an all-zero block (absmax 0) mapping to 0 instead of NaN.
// Correctly rounded on both sides (nvcc's default, made explicit against fast-math flags).
LT_Q8_HD float quant_normalise(float x, float absmax) {
#if defined(__CUDA_ARCH__)
  return absmax > 0.0f ? __fdiv_rn(x, absmax) : 0.0f;
#else
  return absmax > 0.0f ? x / absmax : 0.0f;
#endif
}

}  // namespace lt
