// Weight quantisation on the GPU: the bits cpu_quant.cpp computes (backend/nf4.h), with explicit
// round-to-nearest intrinsics (no FMA contraction, an IEEE reciprocal).
//
// nf4_quantize: one warp per 64-element block, each lane a pair of elements (one output byte).
// nf4_dequantize: one thread per byte. nf4_dequantize_nested (what nf4_linear runs): one thread
// per 4 code bytes, one 32-bit load and one 16-byte (bf16/f16) or 32-byte (f32) store of 8
// values, the block's absmax decoded from its 8-bit code in the same thread (8 threads share a
// 64-block), the NF4 and nested maps in shared memory: a pass at memory speed over 0.5 + 2 bytes
// per bf16 weight. The 8-bit kernels give each 256-element block to one
// thread block of 256 threads, the map in shared memory.
#include <cstring>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/nf4_decode.cuh"
#include "backend/nf4.h"

namespace lt {
using namespace cuda;

namespace {

constexpr int kThreads = 256;

struct Map256 {
  float v[256];
};

Map256 map_arg(const char* op, std::span<const float> map) {
  LT_CHECK(map.size() == 256, std::string(op) + ": the code map has " + std::to_string(map.size()) + " entries",
           "an 8-bit map has 256", "pass bitsandbytes' signed dynamic map");
  Map256 m;
  std::memcpy(m.v, map.data(), sizeof(m.v));
  return m;
}

void check_flat(const char* op, const char* what, const Tensor& t, int64_t n, DType dtype) {
  LT_CHECK(t.is_contiguous() && t.numel() == n && t.dtype() == dtype,
           std::string(op) + ": " + what + " is " + dtype_name(t.dtype()) + " with " + std::to_string(t.numel()) +
               " elements",
           std::string("it must be contiguous ") + dtype_name(dtype) + " with " + std::to_string(n) + " elements",
           "allocate it from the element count of the quantised tensor");
}

template <class T>
__global__ void nf4_quantize_kernel(uint8_t* codes, float* absmax, const T* x, int64_t n) {
  const int64_t block = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (block >= nf4_blocks(n)) return;  // uniform per warp: blocks are warp-aligned
  const int64_t i = block * kNf4Block + 2 * lane;
  const float a = i < n ? to_f32(x[i]) : 0.0f;
  const float b = i + 1 < n ? to_f32(x[i + 1]) : 0.0f;
  const float amax = warp_max(fmaxf(fabsf(a), fabsf(b)));
  const float recip = __frcp_rn(amax);  // inf for an all-zero block
  if (lane == 0) absmax[block] = amax;
  if (i >= n) return;
  const uint8_t high = nf4_code(__fmul_rn(a, recip));
  const uint8_t low = i + 1 < n ? nf4_code(__fmul_rn(b, recip)) : nf4_pad_code(recip);
  codes[i / 2] = uint8_t(high << 4 | low);
}

// The 16 values in shared memory: nf4_value's table indexed by a run-time code would otherwise
// live in local memory.
template <class T>
__global__ void nf4_dequantize_kernel(T* out, const uint8_t* codes, const float* absmax, int64_t n) {
  __shared__ float lut[16];
  if (threadIdx.x < 16) lut[threadIdx.x] = nf4_value(int(threadIdx.x));
  __syncthreads();
  const int64_t byte = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t i = 2 * byte;
  if (i >= n) return;
  const uint8_t c = codes[byte];
  const float a = absmax[i / kNf4Block];  // a pair never straddles blocks (64 is even)
  out[i] = from_f32<T>(__fmul_rn(lut[c >> 4], a));
  if (i + 1 < n) out[i + 1] = from_f32<T>(__fmul_rn(lut[c & 15], a));
}

// `vector`: out is aligned for Nf4Pack8 and codes for 32-bit loads (the store's views always are).
template <class T>
__global__ void nf4_dequantize_nested_kernel(T* out, const uint8_t* codes, const uint8_t* absmax_codes,
                                             const float* nested_absmax, float offset, int64_t n, bool vector,
                                             Map256 map) {
  __shared__ float smap[256];
  __shared__ float lut[16];
  smap[threadIdx.x] = map.v[threadIdx.x];
  if (threadIdx.x < 16) lut[threadIdx.x] = nf4_value(int(threadIdx.x));
  __syncthreads();
  const int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t i0 = 8 * g;  // 8 values, inside one 64-block
  if (i0 >= n) return;
  const int64_t block = i0 / kNf4Block;
  const float a = __fadd_rn(__fmul_rn(smap[absmax_codes[block]], nested_absmax[block / kNf4NestedBlock]), offset);
  nf4_decode8(out, codes, g, n, a, lut, vector);
}

__global__ void q8_quantize_kernel(uint8_t* codes, float* absmax, const float* x, float offset, int64_t n,
                                   Map256 map) {
  __shared__ float smap[256];
  __shared__ float warp_amax[kThreads / 32];
  smap[threadIdx.x] = map.v[threadIdx.x];
  const int64_t i = int64_t(blockIdx.x) * kNf4NestedBlock + threadIdx.x;
  const float y = i < n ? __fsub_rn(x[i], offset) : 0.0f;
  const float m = warp_max(fabsf(y));
  if ((threadIdx.x & 31) == 0) warp_amax[threadIdx.x >> 5] = m;
  __syncthreads();
  float amax = 0.0f;
  for (int w = 0; w < kThreads / 32; ++w) amax = fmaxf(amax, warp_amax[w]);
  if (threadIdx.x == 0) absmax[blockIdx.x] = amax;
  if (i < n) codes[i] = q8_bnb_code(smap, __fmul_rn(y, __frcp_rn(amax)));
}

__global__ void q8_dequantize_kernel(float* out, const uint8_t* codes, const float* absmax, float offset, int64_t n,
                                     Map256 map) {
  __shared__ float smap[256];
  smap[threadIdx.x] = map.v[threadIdx.x];
  __syncthreads();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __fadd_rn(__fmul_rn(smap[codes[i]], absmax[i / kNf4NestedBlock]), offset);
}

}  // namespace

void CudaBackend::nf4_quantize(const Tensor& codes, const Tensor& absmax, const Tensor& x) {
  const int64_t n = x.numel();
  LT_CHECK(x.is_contiguous(), "nf4_quantize: x is strided", "the kernel reads it flat", "make it contiguous");
  check_flat("nf4_quantize", "codes", codes, nf4_bytes(n), DType::U8);
  check_flat("nf4_quantize", "absmax", absmax, nf4_blocks(n), DType::F32);
  if (n == 0) return;
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    nf4_quantize_kernel<T><<<blocks_for(nf4_blocks(n) * 32, kThreads), kThreads, 0, current_stream()>>>(
        codes.data<uint8_t>(), absmax.data<float>(), static_cast<const T*>(x.raw_data()), n);
    LT_CUDA_LAUNCH_CHECK("nf4_quantize_kernel");
  });
}

void CudaBackend::nf4_dequantize(const Tensor& out, const Tensor& codes, const Tensor& absmax) {
  const int64_t n = out.numel();
  LT_CHECK(out.is_contiguous(), "nf4_dequantize: out is strided", "the kernel writes it flat", "make it contiguous");
  check_flat("nf4_dequantize", "codes", codes, nf4_bytes(n), DType::U8);
  check_flat("nf4_dequantize", "absmax", absmax, nf4_blocks(n), DType::F32);
  if (n == 0) return;
  dispatch_float(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    nf4_dequantize_kernel<T><<<blocks_for(nf4_bytes(n), kThreads), kThreads, 0, current_stream()>>>(
        static_cast<T*>(out.raw_data()), codes.data<uint8_t>(), absmax.data<float>(), n);
    LT_CUDA_LAUNCH_CHECK("nf4_dequantize_kernel");
  });
}

void CudaBackend::nf4_dequantize_nested(const Tensor& out, const Tensor& codes, const Tensor& absmax_codes,
                                        const Tensor& nested_absmax, float offset, std::span<const float> map) {
  const int64_t n = out.numel();
  const int64_t blocks = nf4_blocks(n);
  const Map256 m = map_arg("nf4_dequantize_nested", map);
  LT_CHECK(out.is_contiguous(), "nf4_dequantize_nested: out is strided", "the kernel writes it flat",
           "make it contiguous");
  check_flat("nf4_dequantize_nested", "codes", codes, nf4_bytes(n), DType::U8);
  check_flat("nf4_dequantize_nested", "absmax_codes", absmax_codes, blocks, DType::U8);
  check_flat("nf4_dequantize_nested", "nested_absmax", nested_absmax, nf4_nested_blocks(blocks), DType::F32);
  if (n == 0) return;
  dispatch_float(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const bool vector = reinterpret_cast<uintptr_t>(out.raw_data()) % sizeof(Nf4Pack8<T>) == 0 &&
                        reinterpret_cast<uintptr_t>(codes.raw_data()) % 4 == 0;
    nf4_dequantize_nested_kernel<T><<<blocks_for((n + 7) / 8, kThreads), kThreads, 0, current_stream()>>>(
        static_cast<T*>(out.raw_data()), codes.data<uint8_t>(), absmax_codes.data<uint8_t>(),
        nested_absmax.data<float>(), offset, n, vector, m);
    LT_CUDA_LAUNCH_CHECK("nf4_dequantize_nested_kernel");
  });
}

void CudaBackend::q8_blockwise_quantize(const Tensor& codes, const Tensor& absmax, const Tensor& x, float offset,
                                        std::span<const float> map) {
  const int64_t n = x.numel();
  const Map256 m = map_arg("q8_blockwise_quantize", map);
  check_flat("q8_blockwise_quantize", "x", x, n, DType::F32);
  check_flat("q8_blockwise_quantize", "codes", codes, n, DType::U8);
  check_flat("q8_blockwise_quantize", "absmax", absmax, nf4_nested_blocks(n), DType::F32);
  if (n == 0) return;
  q8_quantize_kernel<<<unsigned(nf4_nested_blocks(n)), kThreads, 0, current_stream()>>>(
      codes.data<uint8_t>(), absmax.data<float>(), x.data<float>(), offset, n, m);
  LT_CUDA_LAUNCH_CHECK("q8_quantize_kernel");
}

void CudaBackend::q8_blockwise_dequantize(const Tensor& out, const Tensor& codes, const Tensor& absmax, float offset,
                                          std::span<const float> map) {
  const int64_t n = out.numel();
  const Map256 m = map_arg("q8_blockwise_dequantize", map);
  check_flat("q8_blockwise_dequantize", "out", out, n, DType::F32);
  check_flat("q8_blockwise_dequantize", "codes", codes, n, DType::U8);
  check_flat("q8_blockwise_dequantize", "absmax", absmax, nf4_nested_blocks(n), DType::F32);
  if (n == 0) return;
  q8_dequantize_kernel<<<blocks_for(n, kThreads), kThreads, 0, current_stream()>>>(
      out.data<float>(), codes.data<uint8_t>(), absmax.data<float>(), offset, n, m);
  LT_CUDA_LAUNCH_CHECK("q8_dequantize_kernel");
}

}  // namespace lt
