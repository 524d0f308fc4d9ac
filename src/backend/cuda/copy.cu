// Data movement: fill, strided copy with dtype casts, host transfers, counter-based random fill.
// Conversions mirror cpu_copy.cpp exactly (fill patterns are even computed on the host with the
// CPU's own functions), so a tensor moved or cast on the GPU holds the bits the CPU would hold.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_strided.cuh"
#include "backend/cuda/row_kernels.cuh"
#include "leantrain/random.h"

namespace lt {
using namespace cuda;

namespace {

constexpr int kThreads = 256;

bool is_float_storage(DCode d) { return d == kF32 || d == kBF16 || d == kF16; }

void check_on_device(const Tensor& t, int dev, const char* op, const char* name) {
  LT_CHECK(t.defined() && t.device() == Device::cuda(dev), std::string(op) + ": " + name + " is not on cuda:" +
                                                               std::to_string(dev),
           t.defined() ? "it is on " + t.device().str() : "it is undefined", "move it with .to()");
}

template <class W> __global__ void fill_kernel(W* p, W v, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = v;
}

template <class W> void launch_fill(void* p, uint64_t bits, int64_t n) {
  W v;
  std::memcpy(&v, &bits, sizeof(W));  // little endian: the low bytes hold the pattern
  fill_kernel<W><<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(static_cast<W*>(p), v, n);
  LT_CUDA_LAUNCH_CHECK("fill_kernel");
}

// Element i of any dtype as double (floating) or int64 (integers), as cpu_copy.cpp reads it.
__device__ __forceinline__ double load_double(const void* p, int64_t i, uint8_t dt) {
  switch (dt) {
    case kI32: return double(static_cast<const int32_t*>(p)[i]);
    case kI64: return double(static_cast<const int64_t*>(p)[i]);
    case kU8: return double(static_cast<const uint8_t*>(p)[i]);
    default: return double(load_float(p, i, dt));
  }
}
__device__ __forceinline__ int64_t load_int(const void* p, int64_t i, uint8_t dt) {
  switch (dt) {
    case kI32: return static_cast<const int32_t*>(p)[i];
    case kU8: return static_cast<const uint8_t*>(p)[i];
    default: return static_cast<const int64_t*>(p)[i];
  }
}
// Integers round to nearest (llround), floats round once from double to float, then to 16 bits.
__device__ __forceinline__ void store_double(void* p, int64_t i, uint8_t dt, double v) {
  switch (dt) {
    case kI32: static_cast<int32_t*>(p)[i] = int32_t(llround(v)); return;
    case kI64: static_cast<int64_t*>(p)[i] = int64_t(llround(v)); return;
    case kU8: static_cast<uint8_t*>(p)[i] = uint8_t(llround(v)); return;
    default: store_float(p, i, dt, float(v)); return;
  }
}
// Integer to integer keeps the C++ conversion (wraps), as the CPU does.
__device__ __forceinline__ void store_int(void* p, int64_t i, uint8_t dt, int64_t v) {
  switch (dt) {
    case kI32: static_cast<int32_t*>(p)[i] = int32_t(v); return;
    case kU8: static_cast<uint8_t*>(p)[i] = uint8_t(v); return;
    default: static_cast<int64_t*>(p)[i] = v; return;
  }
}

struct CopyArgs {
  void* dst;
  const void* src;
  int64_t n;
  Layout layout;
  Strides ds, ss;
  bool dst_dense, src_dense;
  uint8_t ddt, sdt;
};

// Same dtype: move W-sized words (the bits, no conversion).
template <class W> __global__ void copy_same_kernel(CopyArgs a) {
  W* d = static_cast<W*>(a.dst);
  const W* s = static_cast<const W*>(a.src);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < a.n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t di = a.dst_dense ? i : strided_offset(i, a.layout, a.ds);
    const int64_t si = a.src_dense ? i : strided_offset(i, a.layout, a.ss);
    d[di] = s[si];
  }
}

__global__ void copy_cast_kernel(CopyArgs a) {
  const bool ints = (a.ddt == kI32 || a.ddt == kI64 || a.ddt == kU8) && (a.sdt == kI32 || a.sdt == kI64 || a.sdt == kU8);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < a.n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t di = a.dst_dense ? i : strided_offset(i, a.layout, a.ds);
    const int64_t si = a.src_dense ? i : strided_offset(i, a.layout, a.ss);
    if (ints) store_int(a.dst, di, a.ddt, load_int(a.src, si, a.sdt));
    else store_double(a.dst, di, a.ddt, load_double(a.src, si, a.sdt));
  }
}

// Float to float casts (f32, bf16, f16) between dense tensors with 16-byte aligned pointers:
// mixed precision's weight casts and the gradient casts back. 8 elements per thread step (16
// bytes of 16-bit, two 16-byte accesses of f32), the n % 8 tail element by element. Each value
// goes through f32, which is exact from every source type, and is stored with store_t's
// rounding: the bits copy_cast_kernel (through double) gives.
constexpr int kCastPack = 8;

template <class S> __device__ __forceinline__ void load_pack8(const S* p, float (&v)[kCastPack]) {
  if constexpr (std::is_same_v<S, float>) {
    const float4 lo = reinterpret_cast<const float4*>(p)[0], hi = reinterpret_cast<const float4*>(p)[1];
    v[0] = lo.x; v[1] = lo.y; v[2] = lo.z; v[3] = lo.w;
    v[4] = hi.x; v[5] = hi.y; v[6] = hi.z; v[7] = hi.w;
  } else {
    rk::load_f32<S, kCastPack>(p, v);
  }
}

template <class D> __device__ __forceinline__ void store_pack8(D* p, const float (&v)[kCastPack]) {
  if constexpr (std::is_same_v<D, float>) {
    reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
  } else {
    rk::Pack<D, kCastPack> pk;
#pragma unroll
    for (int k = 0; k < kCastPack; ++k) store_t(pk.v, k, v[k]);
    *reinterpret_cast<rk::Pack<D, kCastPack>*>(p) = pk;
  }
}

template <class D, class S> __global__ void cast_packed_kernel(D* dst, const S* src, int64_t n) {
  const int64_t npack = n / kCastPack, step = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  for (int64_t k = first; k < npack; k += step) {
    float v[kCastPack];
    load_pack8(src + k * kCastPack, v);
    store_pack8(dst + k * kCastPack, v);
  }
  for (int64_t i = npack * kCastPack + first; i < n; i += step) store_t(dst, i, load_t(src, i));
}

template <class T>
__global__ void fill_random_kernel(T* out, int64_t n, bool normal, float a, float b, uint64_t seed, uint64_t offset) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    // fmaf: the CPU reference is compiled with FMA contraction (x86-64-v3), so a + b*x is one
    // rounding there too; this keeps uniform draws bit-identical.
    const float v = normal ? fmaf(b, rng_normal(seed, offset + uint64_t(i)), a)
                           : fmaf(b - a, rng_uniform(seed, offset + uint64_t(i)), a);
    store_t(out, i, v);
  }
}

}  // namespace

void CudaBackend::fill(const Tensor& out, double value) {
  check_on_device(out, device_index_, "fill", "out");
  LT_CHECK(out.is_contiguous(), "fill: out must be contiguous", "got strides " + shape_str(out.strides()),
           "fill a contiguous tensor and copy it into the view");
  const int64_t n = out.numel();
  if (n == 0) return;
  // The element's bit pattern, computed by the CPU's own conversions.
  uint64_t bits = 0;
  switch (out.dtype()) {
    case DType::F32: { float f = float(value); std::memcpy(&bits, &f, 4); break; }
    case DType::BF16: bits = float_to_bf16(float(value)); break;
    case DType::F16: bits = float_to_half(float(value)); break;
    case DType::I32: bits = uint32_t(int32_t(std::llround(value))); break;
    case DType::I64: bits = uint64_t(int64_t(std::llround(value))); break;
    case DType::U8: bits = uint8_t(std::llround(value)); break;
    default: dcode(out.dtype());  // throws a clear error for f64
  }
  const size_t es = dtype_size(out.dtype());
  if (bits == 0 || es == 1) {
    LT_CUDA_CHECK(cudaMemsetAsync(out.raw_data(), int(bits & 0xff), size_t(n) * es, current_stream()));
    return;
  }
  switch (es) {
    case 2: launch_fill<uint16_t>(out.raw_data(), bits, n); break;
    case 4: launch_fill<uint32_t>(out.raw_data(), bits, n); break;
    default: launch_fill<uint64_t>(out.raw_data(), bits, n); break;
  }
}

void CudaBackend::copy(const Tensor& dst, const Tensor& src) {
  check_on_device(dst, device_index_, "copy", "dst");
  check_on_device(src, device_index_, "copy", "src");
  LT_CHECK(dst.shape() == src.shape(), "copy: shape mismatch", shape_str(dst.shape()) + " vs " + shape_str(src.shape()),
           "copy between tensors of one shape");
  const int64_t n = dst.numel();
  if (n == 0) return;
  const DCode ddt = dcode(dst.dtype()), sdt = dcode(src.dtype());
  if (ddt == sdt && dst.is_contiguous() && src.is_contiguous()) {
    LT_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), size_t(dst.nbytes()), cudaMemcpyDeviceToDevice,
                                  current_stream()));
    return;
  }
  const bool floats = is_float_storage(ddt) && is_float_storage(sdt);
  if (floats && dst.is_contiguous() && src.is_contiguous() && rk::aligned16(dst.raw_data()) &&
      rk::aligned16(src.raw_data())) {
    dispatch_float(dst.dtype(), [&](auto dtag) {
      using D = decltype(dtag);
      dispatch_float(src.dtype(), [&](auto stag) {
        using S = decltype(stag);
        cast_packed_kernel<D, S><<<grid_for(std::max<int64_t>(n / kCastPack, 1), kThreads), kThreads, 0,
                                   current_stream()>>>(dst.data<D>(), src.data<S>(), n);
      });
    });
    LT_CUDA_LAUNCH_CHECK("cast_packed_kernel");
    return;
  }
  std::vector<Shape> strides{dst.strides(), src.strides()};
  std::vector<Strides> st;
  CopyArgs a;
  a.layout = collapse(dst.shape(), strides, st, "copy");
  a.dst = dst.raw_data();
  a.src = src.raw_data();
  a.n = n;
  a.ds = st[0];
  a.ss = st[1];
  a.dst_dense = is_dense(a.layout, a.ds);
  a.src_dense = is_dense(a.layout, a.ss);
  a.ddt = ddt;
  a.sdt = sdt;
  const unsigned grid = grid_for(n, kThreads);
  if (ddt == sdt) {
    switch (dtype_size(dst.dtype())) {
      case 1: copy_same_kernel<uint8_t><<<grid, kThreads, 0, current_stream()>>>(a); break;
      case 2: copy_same_kernel<uint16_t><<<grid, kThreads, 0, current_stream()>>>(a); break;
      case 4: copy_same_kernel<uint32_t><<<grid, kThreads, 0, current_stream()>>>(a); break;
      default: copy_same_kernel<uint64_t><<<grid, kThreads, 0, current_stream()>>>(a); break;
    }
    LT_CUDA_LAUNCH_CHECK("copy_same_kernel");
  } else {
    copy_cast_kernel<<<grid, kThreads, 0, current_stream()>>>(a);
    LT_CUDA_LAUNCH_CHECK("copy_cast_kernel");
  }
}

// Host transfers synchronise: the caller may reuse or free the host buffer as soon as they return
// (cudaMemcpyAsync alone would not guarantee that for pinned memory).
void CudaBackend::copy_from_host(const Tensor& dst, const void* src) {
  check_on_device(dst, device_index_, "copy_from_host", "dst");
  LT_CHECK(dst.is_contiguous(), "copy_from_host: dst must be contiguous", "got a strided view",
           "copy into a contiguous tensor first");
  if (dst.nbytes() == 0) return;
  LT_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src, size_t(dst.nbytes()), cudaMemcpyHostToDevice, current_stream()));
  LT_CUDA_CHECK(cudaStreamSynchronize(current_stream()));
}

// The loader's staged copy: src is pinned (allocate_pinned_host), so the DMA runs while the host goes
// on; the caller records an event after it and keeps src unchanged until the event completed.
void CudaBackend::copy_from_host_async(const Tensor& dst, const void* src) {
  check_on_device(dst, device_index_, "copy_from_host_async", "dst");
  LT_CHECK(dst.is_contiguous(), "copy_from_host_async: dst must be contiguous", "got a strided view",
           "copy into a contiguous tensor first");
  if (dst.nbytes() == 0) return;
  DeviceGuard g(device_index_);
  LT_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src, size_t(dst.nbytes()), cudaMemcpyHostToDevice, current_stream()));
}

// Activation offload's device-to-host copy: dst is pinned, so the DMA runs while the host goes on;
// the caller records an event after it and calls record_stream on src's memory.
void CudaBackend::copy_to_host_async(void* dst, const Tensor& src) {
  check_on_device(src, device_index_, "copy_to_host_async", "src");
  LT_CHECK(src.is_contiguous(), "copy_to_host_async: src must be contiguous", "got a strided view",
           "make it contiguous first");
  if (src.nbytes() == 0) return;
  DeviceGuard g(device_index_);
  LT_CUDA_CHECK(cudaMemcpyAsync(dst, src.raw_data(), size_t(src.nbytes()), cudaMemcpyDeviceToHost, current_stream()));
}

void CudaBackend::copy_to_host(void* dst, const Tensor& src) {
  check_on_device(src, device_index_, "copy_to_host", "src");
  LT_CHECK(src.is_contiguous(), "copy_to_host: src must be contiguous", "got a strided view",
           "make it contiguous first");
  if (src.nbytes() == 0) return;
  LT_CUDA_CHECK(cudaMemcpyAsync(dst, src.raw_data(), size_t(src.nbytes()), cudaMemcpyDeviceToHost, current_stream()));
  LT_CUDA_CHECK(cudaStreamSynchronize(current_stream()));
}

void CudaBackend::fill_random(const Tensor& out, RandomKind kind, float a, float b, uint64_t seed, uint64_t offset) {
  check_on_device(out, device_index_, "fill_random", "out");
  LT_CHECK(out.is_contiguous(), "fill_random: out must be contiguous", "got a strided view", "fill a contiguous tensor");
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch_float(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    fill_random_kernel<T><<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(
        out.data<T>(), n, kind == RandomKind::Normal, a, b, seed, offset);
    LT_CUDA_LAUNCH_CHECK("fill_random_kernel");
  });
}

}  // namespace lt
