// Strided indexing for kernels that take arbitrary views (copy, broadcast binary ops), and
// raw dtype load/store by runtime code. Dims are collapsed on the host first (size-1 dims
// dropped, adjacent dims merged where every tensor is contiguous across them), so the common
// cases reach the kernel as rank 1 and the index arithmetic stays short.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/cuda/cuda_common.cuh"

namespace lt::cuda {

inline constexpr int kMaxDims = 8;

struct Strides {
  int64_t s[kMaxDims];
};

struct Layout {
  int rank = 0;
  int64_t size[kMaxDims];
};

// Element offset of row-major linear index i in a tensor with `st` strides over `l`.
__device__ __forceinline__ int64_t strided_offset(int64_t i, const Layout& l, const Strides& st) {
  int64_t off = 0;
#pragma unroll
  for (int d = kMaxDims - 1; d >= 0; --d) {
    if (d >= l.rank) continue;
    const int64_t q = i / l.size[d];
    off += (i - q * l.size[d]) * st.s[d];
    i = q;
  }
  return off;
}

// Collapses `shape` jointly for every strides list in `strides` (same rank as shape).
// Fails with a clear lt::Error when more than kMaxDims dims remain.
inline Layout collapse(const Shape& shape, std::vector<Shape>& strides, std::vector<Strides>& out, const char* op) {
  Shape sz;
  std::vector<Shape> st(strides.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    const bool merge = !sz.empty() && [&] {
      for (size_t t = 0; t < strides.size(); ++t)
        if (st[t].back() != strides[t][d] * shape[d]) return false;
      return true;
    }();
    if (merge) {
      sz.back() *= shape[d];
      for (size_t t = 0; t < strides.size(); ++t) st[t].back() = strides[t][d];
    } else {
      sz.push_back(shape[d]);
      for (size_t t = 0; t < strides.size(); ++t) st[t].push_back(strides[t][d]);
    }
  }
  LT_CHECK(sz.size() <= size_t(kMaxDims), std::string(op) + ": too many strided dimensions for the CUDA kernel",
           std::to_string(sz.size()) + " dims remain after merging, the kernel takes " + std::to_string(kMaxDims),
           "make the tensor contiguous first");
  Layout l;
  l.rank = int(sz.size());
  for (size_t d = 0; d < sz.size(); ++d) l.size[d] = sz[d];
  out.assign(strides.size(), Strides{});
  for (size_t t = 0; t < strides.size(); ++t)
    for (size_t d = 0; d < sz.size(); ++d) out[t].s[d] = st[t][d];
  return l;
}

// True when the strides are the contiguous ones of the layout (index i is element i).
inline bool is_dense(const Layout& l, const Strides& s) {
  int64_t expect = 1;
  for (int d = l.rank - 1; d >= 0; --d) {
    if (s.s[d] != expect) return false;
    expect *= l.size[d];
  }
  return true;
}

// Runtime dtype codes for kernels that mix dtypes (copy, multi-tensor optimizers).
enum DCode : uint8_t { kF32, kBF16, kF16, kI32, kI64, kU8 };
inline DCode dcode(DType t) {
  switch (t) {
    case DType::F32: return kF32;
    case DType::BF16: return kBF16;
    case DType::F16: return kF16;
    case DType::I32: return kI32;
    case DType::I64: return kI64;
    case DType::U8: return kU8;
    default:
      fail(std::string("dtype ") + dtype_name(t) + " is not supported on CUDA", "f64 is kept for CPU reference checks",
           "cast the tensor first");
  }
}

// float -> bf16 exactly as the CPU does it (round to nearest even, quiet NaN kept).
__device__ __forceinline__ uint16_t f32_to_bf16_bits(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
__device__ __forceinline__ float bf16_bits_to_f32(uint16_t h) { return __uint_as_float(uint32_t(h) << 16); }

// Float load/store of a floating element by runtime dtype (f32, bf16, f16).
__device__ __forceinline__ float load_float(const void* p, int64_t i, uint8_t dt) {
  switch (dt) {
    case kBF16: return bf16_bits_to_f32(static_cast<const uint16_t*>(p)[i]);
    case kF16: return __half2float(static_cast<const __half*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}
__device__ __forceinline__ void store_float(void* p, int64_t i, uint8_t dt, float v) {
  switch (dt) {
    case kBF16: static_cast<uint16_t*>(p)[i] = f32_to_bf16_bits(v); return;
    case kF16: static_cast<__half*>(p)[i] = __float2half_rn(v); return;
    default: static_cast<float*>(p)[i] = v; return;
  }
}

// Typed versions for templated kernels (T = float, __nv_bfloat16, __half), with the CPU's
// bf16 rounding so that stored values match the reference bit for bit.
template <class T> __device__ __forceinline__ float load_t(const T* p, int64_t i) { return to_f32(p[i]); }
template <class T> __device__ __forceinline__ void store_t(T* p, int64_t i, float v) { p[i] = from_f32<T>(v); }
template <> __device__ __forceinline__ void store_t<__nv_bfloat16>(__nv_bfloat16* p, int64_t i, float v) {
  reinterpret_cast<uint16_t*>(p)[i] = f32_to_bf16_bits(v);
}

// Grid size for a grid-stride loop over n elements.
inline unsigned grid_for(int64_t n, int threads, int max_blocks = 65536) {
  const int64_t b = (n + threads - 1) / threads;
  return unsigned(b < 1 ? 1 : (b > max_blocks ? max_blocks : b));
}

}  // namespace lt::cuda
