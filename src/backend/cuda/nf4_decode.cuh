#pragma once
// The NF4 decode step that quant.cu's dequantisation and moe.cu's per-expert pieces share: one
// thread turns 4 code bytes into 8 values of one 64-value block, each value the NF4 level times
// the block's absmax (rounded as bitsandbytes' kernel rounds it).
#include <cstdint>

#include "backend/cuda/cuda_common.cuh"

namespace lt::cuda {

template <class T>
struct alignas(8 * sizeof(T)) Nf4Pack8 {
  T v[8];
};

// Values 8 g .. 8 g + 7 of out (n in all) from codes (two values a byte, high nibble first), with
// absmax a and the 16 NF4 levels in lut (shared memory). `vector`: out is aligned for Nf4Pack8
// and codes for 32-bit loads; the tail (8 g + 8 > n) is decoded a value at a time either way.
template <class T>
__device__ __forceinline__ void nf4_decode8(T* out, const uint8_t* codes, int64_t g, int64_t n, float a,
                                            const float* lut, bool vector) {
  const int64_t i0 = 8 * g;
  if (vector && i0 + 8 <= n) {
    const uint32_t c = reinterpret_cast<const uint32_t*>(codes)[g];
    Nf4Pack8<T> o;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const uint32_t byte = (c >> (8 * b)) & 0xffu;  // little-endian: byte b holds values 2b, 2b + 1
      o.v[2 * b] = from_f32<T>(__fmul_rn(lut[byte >> 4], a));
      o.v[2 * b + 1] = from_f32<T>(__fmul_rn(lut[byte & 15u], a));
    }
    reinterpret_cast<Nf4Pack8<T>*>(out)[g] = o;
    return;
  }
  for (int64_t i = i0; i < n && i < i0 + 8; ++i) {
    const uint8_t byte = codes[i / 2];
    out[i] = from_f32<T>(__fmul_rn(lut[(i % 2 == 0) ? byte >> 4 : byte & 15], a));
  }
}

}  // namespace lt::cuda
