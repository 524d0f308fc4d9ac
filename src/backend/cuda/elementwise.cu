// Elementwise ops: binary with broadcast strides, every UnaryOp forward and backward, dropout.
// Math in f32 as in cpu_elementwise.cpp; the op is a runtime switch (uniform across the grid),
// so each kernel is compiled once per dtype rather than once per op. Dropout draws the same
// keep mask as the CPU from (seed, offset + i), so backward and recomputation regenerate it.
//
// Dense operands whose pointers are 16-byte aligned take the packed kernels: each thread moves
// 16 bytes (8 bf16) per load and store, and the activations of the models (GELU both ways,
// SiLU) and the plain add are compiled with the op fixed, so the switch folds away. The
// per-element math and rounding are those of the scalar kernels; only the memory access and
// the index arithmetic change.
#include <algorithm>
#include <type_traits>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_strided.cuh"
#include "backend/cuda/row_kernels.cuh"
#include "leantrain/random.h"

namespace lt {
using namespace cuda;

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float apply_binary(BinaryOp op, float x, float y) {
  switch (op) {
    case BinaryOp::Add: return x + y;
    case BinaryOp::Sub: return x - y;
    case BinaryOp::Mul: return x * y;
    case BinaryOp::Div: return x / y;
  }
  return 0.f;
}

__device__ __forceinline__ float gelu_inner(float x) { return 0.7978845608028654f * (x + 0.044715f * x * x * x); }
__device__ __forceinline__ float sigmoidf(float x) { return 1.f / (1.f + expf(-x)); }

// The tanh GELU on 16-bit tensors: the hardware tanh (tanh.approx.f32, relative error about
// 2^-11) instead of tanhf, whose ~30 instructions made the [16384, 3072] GELU backward of GPT-2
// compute-bound (2.5 TB/s on the H200). Its error is below a bf16/f16 result's rounding; f32
// tensors keep tanhf.
__device__ __forceinline__ float tanh_fast(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float gelu_tanh_fast(float x) { return 0.5f * x * (1.f + tanh_fast(gelu_inner(x))); }
__device__ __forceinline__ float gelu_tanh_fast_derivative(float x) {
  const float t = tanh_fast(gelu_inner(x));
  const float dinner = 0.7978845608028654f * (1.f + 0.134145f * x * x);
  return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * dinner;
}

__device__ __forceinline__ float apply_unary(UnaryOp op, float x, float alpha) {
  switch (op) {
    case UnaryOp::Scale: return x * alpha;
    case UnaryOp::AddScalar: return x + alpha;
    case UnaryOp::Neg: return -x;
    case UnaryOp::Exp: return expf(x);
    case UnaryOp::Log: return logf(x);
    case UnaryOp::Sqrt: return sqrtf(x);
    case UnaryOp::Rsqrt: return 1.f / sqrtf(x);
    case UnaryOp::Square: return x * x;
    case UnaryOp::Tanh: return tanhf(x);
    case UnaryOp::Sigmoid: return sigmoidf(x);
    case UnaryOp::Relu: return x > 0.f ? x : 0.f;
    case UnaryOp::GeluTanh: return 0.5f * x * (1.f + tanhf(gelu_inner(x)));
    case UnaryOp::GeluErf: return 0.5f * x * (1.f + erff(x * 0.7071067811865476f));
    case UnaryOp::Silu: return x / (1.f + expf(-x));
    case UnaryOp::PowScalar: return powf(x, alpha);
    case UnaryOp::LogSigmoid: return fminf(x, 0.f) - log1pf(expf(-fabsf(x)));
  }
  return 0.f;
}

// d op(x) / dx, as cpu_elementwise.cpp defines it.
__device__ __forceinline__ float derivative(UnaryOp op, float x, float alpha) {
  switch (op) {
    case UnaryOp::Scale: return alpha;
    case UnaryOp::AddScalar: return 1.f;
    case UnaryOp::Neg: return -1.f;
    case UnaryOp::Exp: return expf(x);
    case UnaryOp::Log: return 1.f / x;
    case UnaryOp::Sqrt: return 0.5f / sqrtf(x);
    case UnaryOp::Rsqrt: return -0.5f / (x * sqrtf(x));
    case UnaryOp::Square: return 2.f * x;
    case UnaryOp::Tanh: { const float t = tanhf(x); return 1.f - t * t; }
    case UnaryOp::Sigmoid: { const float s = sigmoidf(x); return s * (1.f - s); }
    case UnaryOp::Relu: return x > 0.f ? 1.f : 0.f;
    case UnaryOp::GeluTanh: {
      const float t = tanhf(gelu_inner(x));
      const float dinner = 0.7978845608028654f * (1.f + 0.134145f * x * x);
      return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * dinner;
    }
    case UnaryOp::GeluErf: {
      const float cdf = 0.5f * (1.f + erff(x * 0.7071067811865476f));
      const float pdf = expf(-0.5f * x * x) * 0.3989422804014327f;
      return cdf + x * pdf;
    }
    case UnaryOp::Silu: { const float s = sigmoidf(x); return s * (1.f + x * (1.f - s)); }
    case UnaryOp::PowScalar: return alpha * powf(x, alpha - 1.f);
    case UnaryOp::LogSigmoid: return sigmoidf(-x);
  }
  return 0.f;
}

struct BinaryArgs {
  BinaryOp op;
  int64_t n;
  Layout layout;
  Strides as, bs;
  bool a_dense, b_dense;
  int64_t b_row;  // > 0: b is one row of this length repeated (bias add, row scale)
};

template <class T> __global__ void binary_kernel(T* out, const T* a, const T* b, BinaryArgs p) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < p.n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ia = p.a_dense ? i : strided_offset(i, p.layout, p.as);
    const int64_t ib = p.b_dense ? i : (p.b_row > 0 ? i % p.b_row : strided_offset(i, p.layout, p.bs));
    store_t(out, i, apply_binary(p.op, load_t(a, ia), load_t(b, ib)));
  }
}

template <class T> __global__ void unary_kernel(T* out, const T* x, int64_t n, UnaryOp op, float alpha) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    store_t(out, i, apply_unary(op, load_t(x, i), alpha));
}

// x may be null for ops whose derivative does not read it (Scale, AddScalar, Neg).
template <class T>
__global__ void unary_backward_kernel(T* dx, const T* dy, const T* x, int64_t n, UnaryOp op, float alpha) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    store_t(dx, i, load_t(dy, i) * derivative(op, x ? load_t(x, i) : 0.f, alpha));
}

template <class T>
__global__ void dropout_kernel(T* out, const T* x, int64_t n, float p, float keep_scale, uint64_t seed,
                               uint64_t offset) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const bool keep = rng_uniform(seed, offset + uint64_t(i)) >= p;
    store_t(out, i, keep ? load_t(x, i) * keep_scale : 0.f);
  }
}

// --- packed kernels: P = 16 bytes of T per access; the n % P tail goes element by element ---

// P values stored with store_t's rounding (the CPU's bf16 rounding, NaN payload kept).
template <class T, int P> __device__ __forceinline__ void store_pack(T* p, const float (&v)[P]) {
  rk::Pack<T, P> pk;
#pragma unroll
  for (int k = 0; k < P; ++k) store_t(pk.v, k, v[k]);
  *reinterpret_cast<rk::Pack<T, P>*>(p) = pk;
}

// The op as a template argument: kRuntimeOp takes it from the launch, any other value fixes it.
constexpr int kRuntimeOp = -1;
template <int OP> __device__ __forceinline__ UnaryOp unary_op_of(UnaryOp runtime) {
  return OP == kRuntimeOp ? runtime : UnaryOp(OP);
}
template <int OP> __device__ __forceinline__ BinaryOp binary_op_of(BinaryOp runtime) {
  return OP == kRuntimeOp ? runtime : BinaryOp(OP);
}

template <class T, int OP> __global__ void unary_vec_kernel(T* out, const T* x, int64_t n, UnaryOp op_in, float alpha) {
  constexpr int P = rk::kVec<T>;
  const UnaryOp op = unary_op_of<OP>(op_in);
  const int64_t npack = n / P, step = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  for (int64_t k = first; k < npack; k += step) {
    float v[P];
    rk::load_f32<T, P>(x + k * P, v);
    if constexpr (sizeof(T) == 2 && OP == int(UnaryOp::GeluTanh)) {
#pragma unroll
      for (int j = 0; j < P; ++j) v[j] = gelu_tanh_fast(v[j]);
    } else {
#pragma unroll
      for (int j = 0; j < P; ++j) v[j] = apply_unary(op, v[j], alpha);
    }
    store_pack<T, P>(out + k * P, v);
  }
  for (int64_t i = npack * P + first; i < n; i += step) store_t(out, i, apply_unary(op, load_t(x, i), alpha));
}

// x null: the derivative does not read it (Scale, AddScalar, Neg).
template <class T, int OP>
__global__ void unary_backward_vec_kernel(T* dx, const T* dy, const T* x, int64_t n, UnaryOp op_in, float alpha) {
  constexpr int P = rk::kVec<T>;
  const UnaryOp op = unary_op_of<OP>(op_in);
  const int64_t npack = n / P, step = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  for (int64_t k = first; k < npack; k += step) {
    float g[P], v[P];
    rk::load_f32<T, P>(dy + k * P, g);
    if (x) rk::load_f32<T, P>(x + k * P, v);
    if constexpr (sizeof(T) == 2 && OP == int(UnaryOp::GeluTanh)) {
#pragma unroll
      for (int j = 0; j < P; ++j) g[j] *= gelu_tanh_fast_derivative(v[j]);
    } else {
#pragma unroll
      for (int j = 0; j < P; ++j) g[j] *= derivative(op, x ? v[j] : 0.f, alpha);
    }
    store_pack<T, P>(dx + k * P, g);
  }
  for (int64_t i = npack * P + first; i < n; i += step)
    store_t(dx, i, load_t(dy, i) * derivative(op, x ? load_t(x, i) : 0.f, alpha));
}

// a dense; b dense (b_row == 0) or one row of b_row elements (a multiple of P) repeated.
template <class T, int OP>
__global__ void binary_vec_kernel(T* out, const T* a, const T* b, int64_t n, BinaryOp op_in, int64_t b_row) {
  constexpr int P = rk::kVec<T>;
  const BinaryOp op = binary_op_of<OP>(op_in);
  const int64_t npack = n / P, step = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  for (int64_t k = first; k < npack; k += step) {
    float va[P], vb[P];
    rk::load_f32<T, P>(a + k * P, va);
    rk::load_f32<T, P>(b + (b_row > 0 ? (k * P) % b_row : k * P), vb);
#pragma unroll
    for (int j = 0; j < P; ++j) va[j] = apply_binary(op, va[j], vb[j]);
    store_pack<T, P>(out + k * P, va);
  }
  for (int64_t i = npack * P + first; i < n; i += step)
    store_t(out, i, apply_binary(op, load_t(a, i), load_t(b, b_row > 0 ? i % b_row : i)));
}

bool aligned16(const void* p) { return p == nullptr || rk::aligned16(p); }

// Calls f(std::integral_constant<int, OP>) with the op fixed for the models' activations
// (GELU tanh/erf, SiLU) and kRuntimeOp for the rest.
template <class F> void with_unary_op(UnaryOp op, F&& f) {
  switch (op) {
    case UnaryOp::GeluTanh: f(std::integral_constant<int, int(UnaryOp::GeluTanh)>{}); return;
    case UnaryOp::GeluErf: f(std::integral_constant<int, int(UnaryOp::GeluErf)>{}); return;
    case UnaryOp::Silu: f(std::integral_constant<int, int(UnaryOp::Silu)>{}); return;
    default: f(std::integral_constant<int, kRuntimeOp>{}); return;
  }
}

unsigned vec_grid(int64_t n, int P) { return grid_for(std::max<int64_t>(n / P, 1), kThreads); }

void check_tensor(const Tensor& t, int dev, const char* op, const char* name, bool contiguous) {
  LT_CHECK(t.defined(), std::string(op) + ": " + name + " is undefined", "the kernel needs it", "pass a tensor");
  LT_CHECK(t.device() == Device::cuda(dev), std::string(op) + ": " + name + " is not on cuda:" + std::to_string(dev),
           "it is on " + t.device().str(), "move it with .to()");
  LT_CHECK(!contiguous || t.is_contiguous(), std::string(op) + ": " + name + " must be contiguous",
           "got strides " + shape_str(t.strides()) + " for shape " + shape_str(t.shape()), "call contiguous() first");
}

void check_like(const Tensor& t, const Tensor& ref, const char* op, const char* name) {
  LT_CHECK(t.dtype() == ref.dtype() && t.numel() == ref.numel(), std::string(op) + ": " + name + " does not match",
           std::string(dtype_name(t.dtype())) + " " + shape_str(t.shape()) + " vs " + dtype_name(ref.dtype()) + " " +
               shape_str(ref.shape()),
           "pass tensors of one dtype and size");
}

}  // namespace

void CudaBackend::binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  check_tensor(out, device_index_, "binary", "out", true);
  check_tensor(a, device_index_, "binary", "a", false);
  check_tensor(b, device_index_, "binary", "b", false);
  LT_CHECK(a.shape() == out.shape() && b.shape() == out.shape(), "binary: operands must carry out's shape",
           shape_str(a.shape()) + ", " + shape_str(b.shape()) + " vs " + shape_str(out.shape()),
           "expand them (stride 0 on broadcast dims) first");
  check_like(a, out, "binary", "a");
  check_like(b, out, "binary", "b");
  const int64_t n = out.numel();
  if (n == 0) return;
  std::vector<Shape> strides{a.strides(), b.strides()};
  std::vector<Strides> st;
  BinaryArgs p;
  p.op = op;
  p.n = n;
  p.layout = collapse(out.shape(), strides, st, "binary");
  p.as = st[0];
  p.bs = st[1];
  p.a_dense = is_dense(p.layout, p.as);
  p.b_dense = is_dense(p.layout, p.bs);
  // b broadcast over leading dims: [.., C] with stride 1 on C and 0 elsewhere.
  p.b_row = 0;
  if (!p.b_dense && p.layout.rank >= 2 && p.bs.s[p.layout.rank - 1] == 1) {
    bool row = true;
    for (int d = 0; d + 1 < p.layout.rank; ++d) row = row && p.bs.s[d] == 0;
    if (row) p.b_row = p.layout.size[p.layout.rank - 1];
  }
  dispatch_float(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    constexpr int P = rk::kVec<T>;
    // Packed: a dense, b dense or a repeated row of whole packs, every pointer 16-byte aligned.
    const bool packed = p.a_dense && (p.b_dense || (p.b_row > 0 && p.b_row % P == 0)) && aligned16(out.raw_data()) &&
                        aligned16(a.raw_data()) && aligned16(b.raw_data());
    if (packed) {
      const int64_t b_row = p.b_dense ? 0 : p.b_row;
      if (op == BinaryOp::Add)
        binary_vec_kernel<T, int(BinaryOp::Add)><<<vec_grid(n, P), kThreads, 0, current_stream()>>>(
            out.data<T>(), a.data<T>(), b.data<T>(), n, op, b_row);
      else
        binary_vec_kernel<T, kRuntimeOp><<<vec_grid(n, P), kThreads, 0, current_stream()>>>(
            out.data<T>(), a.data<T>(), b.data<T>(), n, op, b_row);
      LT_CUDA_LAUNCH_CHECK("binary_vec_kernel");
      return;
    }
    binary_kernel<T><<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(out.data<T>(), a.data<T>(),
                                                                                b.data<T>(), p);
    LT_CUDA_LAUNCH_CHECK("binary_kernel");
  });
}

void CudaBackend::unary(UnaryOp op, const Tensor& out, const Tensor& x, float alpha) {
  check_tensor(out, device_index_, "unary", "out", true);
  check_tensor(x, device_index_, "unary", "x", true);
  check_like(x, out, "unary", "x");
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch_float(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (aligned16(out.raw_data()) && aligned16(x.raw_data())) {
      with_unary_op(op, [&](auto fixed) {
        unary_vec_kernel<T, decltype(fixed)::value><<<vec_grid(n, rk::kVec<T>), kThreads, 0, current_stream()>>>(
            out.data<T>(), x.data<T>(), n, op, alpha);
      });
      LT_CUDA_LAUNCH_CHECK("unary_vec_kernel");
      return;
    }
    unary_kernel<T><<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(out.data<T>(), x.data<T>(), n, op, alpha);
    LT_CUDA_LAUNCH_CHECK("unary_kernel");
  });
}

void CudaBackend::unary_backward(UnaryOp op, const Tensor& dx, const Tensor& dy, const Tensor& x, float alpha) {
  check_tensor(dx, device_index_, "unary_backward", "dx", true);
  check_tensor(dy, device_index_, "unary_backward", "dy", true);
  check_like(dy, dx, "unary_backward", "dy");
  const bool needs_x = !(op == UnaryOp::Scale || op == UnaryOp::AddScalar || op == UnaryOp::Neg);
  if (needs_x || x.defined()) {
    check_tensor(x, device_index_, "unary_backward", "x", true);
    check_like(x, dx, "unary_backward", "x");
  }
  const int64_t n = dx.numel();
  if (n == 0) return;
  dispatch_float(dx.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.defined() ? x.data<T>() : nullptr;
    if (aligned16(dx.raw_data()) && aligned16(dy.raw_data()) && aligned16(px)) {
      with_unary_op(op, [&](auto fixed) {
        unary_backward_vec_kernel<T, decltype(fixed)::value>
            <<<vec_grid(n, rk::kVec<T>), kThreads, 0, current_stream()>>>(dx.data<T>(), dy.data<T>(), px, n, op, alpha);
      });
      LT_CUDA_LAUNCH_CHECK("unary_backward_vec_kernel");
      return;
    }
    unary_backward_kernel<T><<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(dx.data<T>(), dy.data<T>(), px,
                                                                                        n, op, alpha);
    LT_CUDA_LAUNCH_CHECK("unary_backward_kernel");
  });
}

void CudaBackend::dropout(const Tensor& out, const Tensor& x, float p, uint64_t seed, uint64_t offset) {
  check_tensor(out, device_index_, "dropout", "out", true);
  check_tensor(x, device_index_, "dropout", "x", true);
  check_like(x, out, "dropout", "x");
  LT_CHECK(p >= 0.f && p <= 1.f, "dropout: p must be in [0, 1]", "got " + std::to_string(p), "pass a probability");
  const int64_t n = out.numel();
  if (n == 0) return;
  const float keep_scale = p < 1.f ? 1.f / (1.f - p) : 0.f;  // in f32, as the CPU does (p = 1 keeps nothing)
  dispatch_float(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    dropout_kernel<T><<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(out.data<T>(), x.data<T>(), n, p,
                                                                                 keep_scale, seed, offset);
    LT_CUDA_LAUNCH_CHECK("dropout_kernel");
  });
}

}  // namespace lt
