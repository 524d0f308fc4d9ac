// NF4 (4-bit NormalFloat, Dettmers et al. 2023) as bitsandbytes stores it, shared by the CPU and
// CUDA kernels so both produce the same bytes. A tensor of n elements is split into blocks of
// kNf4Block; each block keeps one f32 absmax (the largest |x|) and one 4-bit code per element,
// value = kNf4Values[code] * absmax. Codes are packed two per byte, the first element of a pair
// in the high nibble; a tensor of odd length pads its last low nibble (see nf4_pad_code).
//
// Quantising multiplies x by the reciprocal of the block's absmax (as bitsandbytes does, not a
// division: the product can differ in the last bit) and picks the code by comparing against the
// 15 fixed thresholds of bitsandbytes' decision tree (csrc/kernels.cu, dQuantizeNF4): the code
// is the number of thresholds that x is strictly greater than. An all-zero block has reciprocal
// inf, every 0 * inf is NaN, NaN exceeds no threshold, so the block packs to 0x00 bytes (code 0
// is -1.0, times absmax 0 decodes to 0).
//
// The nested 8-bit quantisation of the absmax values (bitsandbytes' quantize_blockwise, blocks of
// kNf4NestedBlock, the signed dynamic map) uses q8_bnb_code below: bitsandbytes' binary search
// with its own tie rules, which differ from quant8.h's quantize_nearest.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define LT_NF4_HD __host__ __device__ __forceinline__
#else
#define LT_NF4_HD inline
#endif

namespace lt {

inline constexpr int64_t kNf4Block = 64;
inline constexpr int64_t kNf4NestedBlock = 256;

LT_NF4_HD int64_t nf4_blocks(int64_t n) { return (n + kNf4Block - 1) / kNf4Block; }
LT_NF4_HD int64_t nf4_bytes(int64_t n) { return (n + 1) / 2; }
LT_NF4_HD int64_t nf4_nested_blocks(int64_t blocks) { return (blocks + kNf4NestedBlock - 1) / kNf4NestedBlock; }

// The 16 NF4 values, ascending (bitsandbytes' NF4 code book, as f32).
LT_NF4_HD float nf4_value(int code) {
  constexpr float v[16] = {-1.0f,
                           -0.6961928009986877f,
                           -0.5250730514526367f,
                           -0.39491748809814453f,
                           -0.28444138169288635f,
                           -0.18477343022823334f,
                           -0.09105003625154495f,
                           0.0f,
                           0.07958029955625534f,
                           0.16093020141124725f,
                           0.24611230194568634f,
                           0.33791524171829224f,
                           0.44070982933044434f,
                           0.5626170039176941f,
                           0.7229568362236023f,
                           1.0f};
  return v[code & 15];
}

// Threshold k separates code k from code k + 1 (the midpoint of the two values, as bitsandbytes
// rounds it to f32). Ascending.
LT_NF4_HD float nf4_threshold(int k) {
  constexpr float t[15] = {-0.8480964004993439f, -0.6106329262256622f, -0.4599952697753906f,
                           -0.33967943489551544f, -0.23460740596055984f, -0.13791173323988914f,
                           -0.045525018125772476f, 0.03979014977812767f, 0.1202552504837513f,
                           0.2035212516784668f, 0.2920137718319893f, 0.3893125355243683f,
                           0.5016634166240692f, 0.6427869200706482f, 0.8614784181118011f};
  return t[k];
}

// The code of a normalised value: how many thresholds x exceeds (NaN exceeds none: code 0).
// Equivalent to bitsandbytes' decision tree, since the thresholds are sorted.
LT_NF4_HD uint8_t nf4_code(float x) {
  int c = 0;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int k = 0; k < 15; ++k) c += (x > nf4_threshold(k)) ? 1 : 0;
  return uint8_t(c);
}

// The low nibble of the last byte of an odd-length tensor: bitsandbytes pads its partial block
// with zeros and quantises them with the block, so the pad is nf4_code(0 * recip): code 7 (the
// value 0), or code 0 when the block is all zero (0 * inf is NaN).
LT_NF4_HD uint8_t nf4_pad_code(float recip) { return nf4_code(0.0f * recip); }

// bitsandbytes' 8-bit code search (dQuantize, not stochastic) over a sorted 256-entry map: a
// binary search from entry 127 in 7 halving steps, then the nearer of the final entry and the
// neighbour on x's side, with midpoints in f32; a value exactly at a midpoint keeps the final
// entry. NaN walks down to code 0.
LT_NF4_HD uint8_t q8_bnb_code(const float* map, float x) {
  int pivot = 127, upper_pivot = 255, lower_pivot = 0;
  float lower = -1.0f, upper = 1.0f, val = map[pivot];
  for (int step = 64; step > 0; step >>= 1) {
    if (x > val) {
      lower_pivot = pivot;
      lower = val;
      pivot += step;
    } else {
      upper_pivot = pivot;
      upper = val;
      pivot -= step;
    }
    val = map[pivot];
  }
  if (upper_pivot == 255) upper = map[255];
  if (lower_pivot == 0) lower = map[0];
  if (x > val) return uint8_t(x > (upper + val) * 0.5f ? upper_pivot : pivot);
  return uint8_t(x < (lower + val) * 0.5f ? lower_pivot : pivot);
}

}  // namespace lt
