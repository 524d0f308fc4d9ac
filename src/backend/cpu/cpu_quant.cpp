// Weight quantisation, the reference for cuda/quant.cu: NF4 blocks of 64 and the 8-bit block-wise
// quantisation of their absmax, byte for byte as bitsandbytes' kernels (see backend/nf4.h).
#include <algorithm>
#include <cmath>
#include <string>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_common.h"
#include "backend/nf4.h"

// One rounding per f32 operation (map value * absmax, then + offset), as quant.cu's _rn intrinsics
// and torch's two separate ops: no FMA contraction under -march=x86-64-v3.
#pragma GCC optimize("fp-contract=off")

namespace lt {

using namespace cpu;

namespace {

void check_contiguous_1d(const char* op, const char* what, const Tensor& t, int64_t n, DType dtype) {
  LT_CHECK(t.is_contiguous() && t.numel() == n && t.dtype() == dtype,
           std::string(op) + ": " + what + " is " + dtype_name(t.dtype()) + " with " + std::to_string(t.numel()) +
               " elements",
           std::string("it must be contiguous ") + dtype_name(dtype) + " with " + std::to_string(n) + " elements",
           "allocate it from the element count of the quantised tensor");
}

void check_map(const char* op, std::span<const float> map) {
  LT_CHECK(map.size() == 256, std::string(op) + ": the code map has " + std::to_string(map.size()) + " entries",
           "an 8-bit map has 256", "pass bitsandbytes' signed dynamic map");
}

}  // namespace

void CpuBackend::nf4_quantize(const Tensor& codes, const Tensor& absmax, const Tensor& x) {
  const int64_t n = x.numel();
  LT_CHECK(x.is_contiguous(), "nf4_quantize: x is strided", "the kernel reads it flat", "make it contiguous");
  check_contiguous_1d("nf4_quantize", "codes", codes, nf4_bytes(n), DType::U8);
  check_contiguous_1d("nf4_quantize", "absmax", absmax, nf4_blocks(n), DType::F32);
  uint8_t* c = codes.data<uint8_t>();
  float* a = absmax.data<float>();
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, double>) {
      fail("nf4_quantize: x is f64", "NF4 quantises f32, f16 or bf16 weights", "cast the weight to f32 first");
    } else {
      const T* xp = x.data<T>();
      for (int64_t b = 0; b < nf4_blocks(n); ++b) {
        const int64_t lo = b * kNf4Block, hi = std::min(n, lo + kNf4Block);
        float amax = 0.0f;
        for (int64_t i = lo; i < hi; ++i) amax = std::fmax(amax, std::fabs(load(xp, i)));
        a[b] = amax;
        const float recip = 1.0f / amax;  // inf for an all-zero block: its codes become 0
        for (int64_t i = lo; i < hi; i += 2) {
          const uint8_t high = nf4_code(load(xp, i) * recip);
          const uint8_t low = i + 1 < hi ? nf4_code(load(xp, i + 1) * recip) : nf4_pad_code(recip);
          c[i / 2] = uint8_t(high << 4 | low);
        }
      }
    }
  });
}

void CpuBackend::nf4_dequantize(const Tensor& out, const Tensor& codes, const Tensor& absmax) {
  const int64_t n = out.numel();
  LT_CHECK(out.is_contiguous(), "nf4_dequantize: out is strided", "the kernel writes it flat", "make it contiguous");
  check_contiguous_1d("nf4_dequantize", "codes", codes, nf4_bytes(n), DType::U8);
  check_contiguous_1d("nf4_dequantize", "absmax", absmax, nf4_blocks(n), DType::F32);
  const uint8_t* c = codes.data<uint8_t>();
  const float* a = absmax.data<float>();
  dispatch_float(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, double>) {
      fail("nf4_dequantize: out is f64", "NF4 dequantises to f32, f16 or bf16", "use an f32 output");
    } else {
      T* o = out.data<T>();
      for (int64_t i = 0; i < n; ++i) {
        const uint8_t byte = c[i / 2];
        const int code = (i % 2 == 0) ? byte >> 4 : byte & 15;
        store(o, i, nf4_value(code) * a[i / kNf4Block]);
      }
    }
  });
}

void CpuBackend::nf4_dequantize_nested(const Tensor& out, const Tensor& codes, const Tensor& absmax_codes,
                                       const Tensor& nested_absmax, float offset, std::span<const float> map) {
  const int64_t n = out.numel();
  const int64_t blocks = nf4_blocks(n);
  check_map("nf4_dequantize_nested", map);
  LT_CHECK(out.is_contiguous(), "nf4_dequantize_nested: out is strided", "the kernel writes it flat",
           "make it contiguous");
  check_contiguous_1d("nf4_dequantize_nested", "codes", codes, nf4_bytes(n), DType::U8);
  check_contiguous_1d("nf4_dequantize_nested", "absmax_codes", absmax_codes, blocks, DType::U8);
  check_contiguous_1d("nf4_dequantize_nested", "nested_absmax", nested_absmax, nf4_nested_blocks(blocks), DType::F32);
  const uint8_t* c = codes.data<uint8_t>();
  const uint8_t* ac = absmax_codes.data<uint8_t>();
  const float* na = nested_absmax.data<float>();
  dispatch_float(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, double>) {
      fail("nf4_dequantize_nested: out is f64", "NF4 dequantises to f32, f16 or bf16", "use an f32 output");
    } else {
      T* o = out.data<T>();
      for (int64_t b = 0; b < blocks; ++b) {
        const float scaled = map[ac[b]] * na[b / kNf4NestedBlock];  // two roundings, as q8_blockwise_dequantize
        const float a = scaled + offset;
        for (int64_t i = b * kNf4Block; i < std::min(n, (b + 1) * kNf4Block); ++i) {
          const uint8_t byte = c[i / 2];
          const int code = (i % 2 == 0) ? byte >> 4 : byte & 15;
          store(o, i, nf4_value(code) * a);
        }
      }
    }
  });
}

void CpuBackend::q8_blockwise_quantize(const Tensor& codes, const Tensor& absmax, const Tensor& x, float offset,
                                       std::span<const float> map) {
  const int64_t n = x.numel();
  check_map("q8_blockwise_quantize", map);
  check_contiguous_1d("q8_blockwise_quantize", "x", x, n, DType::F32);
  check_contiguous_1d("q8_blockwise_quantize", "codes", codes, n, DType::U8);
  check_contiguous_1d("q8_blockwise_quantize", "absmax", absmax, nf4_nested_blocks(n), DType::F32);
  const float* xp = x.data<float>();
  uint8_t* c = codes.data<uint8_t>();
  float* a = absmax.data<float>();
  for (int64_t b = 0; b < nf4_nested_blocks(n); ++b) {
    const int64_t lo = b * kNf4NestedBlock, hi = std::min(n, lo + kNf4NestedBlock);
    float amax = 0.0f;
    for (int64_t i = lo; i < hi; ++i) amax = std::fmax(amax, std::fabs(xp[i] - offset));
    a[b] = amax;
    const float recip = 1.0f / amax;
    for (int64_t i = lo; i < hi; ++i) c[i] = q8_bnb_code(map.data(), (xp[i] - offset) * recip);
  }
}

void CpuBackend::q8_blockwise_dequantize(const Tensor& out, const Tensor& codes, const Tensor& absmax, float offset,
                                         std::span<const float> map) {
  const int64_t n = out.numel();
  check_map("q8_blockwise_dequantize", map);
  check_contiguous_1d("q8_blockwise_dequantize", "out", out, n, DType::F32);
  check_contiguous_1d("q8_blockwise_dequantize", "codes", codes, n, DType::U8);
  check_contiguous_1d("q8_blockwise_dequantize", "absmax", absmax, nf4_nested_blocks(n), DType::F32);
  const uint8_t* c = codes.data<uint8_t>();
  const float* a = absmax.data<float>();
  float* o = out.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    const float scaled = map[c[i]] * a[i / kNf4NestedBlock];
    o[i] = scaled + offset;
  }
}

}  // namespace lt
