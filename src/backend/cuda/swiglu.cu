// SwiGLU (out = silu(gate) * up; GeGLU with gelu_tanh for silu) and its backward, with the CPU's rounding (cpu_swiglu.cpp):
// silu(gate) and the backward's d(silu) are rounded to the storage type, as transformers' two
// torch ops round them. Gate and up are row-strided views. 16 bytes a thread (8 bf16 values) when
// the width, the row strides and the pointers allow it, else one thread per element; grid-stride.
#include <algorithm>
#include <type_traits>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_strided.cuh"
#include "backend/cuda/row_kernels.cuh"

namespace lt {
using namespace cuda;

namespace {

constexpr int kThreads = 256;

template <class T> __device__ __forceinline__ float rounded(float v) {
  T t;
  store_t(&t, 0, v);
  return load_t(&t, 0);
}

// The gate's activation and its derivative: silu, or (GELU) gelu_pytorch_tanh with the accurate
// tanhf (the CPU reference's arithmetic in f32).
template <bool GELU> __device__ __forceinline__ float gate_act(float x) {
  if (GELU) return 0.5f * x * (1.f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
  return x / (1.f + expf(-x));
}
template <bool GELU> __device__ __forceinline__ float gate_act_grad(float x) {
  if (GELU) {
    const float k = 0.7978845608028654f, t = tanhf(k * (x + 0.044715f * x * x * x));
    return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * k * (1.f + 3.f * 0.044715f * x * x);
  }
  const float sg = 1.f / (1.f + expf(-x));
  return sg * (1.f + x * (1.f - sg));
}

template <class T, bool GELU>
__global__ void swiglu_fwd_kernel(T* out, const T* gate, const T* up, int64_t n, int64_t f, int64_t gs, int64_t us) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n * f; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / f, j = i - r * f;
    const float x = load_t(gate, r * gs + j);
    const float s = rounded<T>(gate_act<GELU>(x));
    store_t(out, i, s * load_t(up, r * us + j));
  }
}

// act (may be null, may alias dout): the forward's activation, written after dout's element is read.
template <class T, bool GELU>
__global__ void swiglu_bwd_kernel(T* dgate, T* dup, const T* dout, const T* gate, const T* up, T* act, int64_t n,
                                  int64_t f, int64_t gs, int64_t us, int64_t dgs, int64_t dus) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n * f; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / f, j = i - r * f;
    const float x = load_t(gate, r * gs + j), d = load_t(dout, i), u = load_t(up, r * us + j);
    const float s = rounded<T>(gate_act<GELU>(x));
    const float ds = rounded<T>(d * u);
    store_t(dup, r * dus + j, d * s);
    store_t(dgate, r * dgs + j, ds * gate_act_grad<GELU>(x));
    if (act) store_t(act, i, s * u);
  }
}

// The packed kernels: the same arithmetic per element as the ones above (bit for bit), P values a
// thread, P = 16 bytes of T; each row's width and stride are multiples of P. A block is
// blockDim.y rows (grid-stride over rows) of blockDim.x threads that stride over the row's packs:
// no 64-bit division a pack (the per-element math is the kernels' cost: two exact expf and
// divisions an element in the backward, so the index arithmetic showed).
template <class T, int P> __device__ __forceinline__ void store_rounded(T* p, const float (&v)[P]) {
  rk::Pack<T, P> pk;
#pragma unroll
  for (int k = 0; k < P; ++k) store_t(pk.v, k, v[k]);
  *reinterpret_cast<rk::Pack<T, P>*>(p) = pk;
}

template <class T, bool GELU>
__global__ void swiglu_fwd_vec_kernel(T* out, const T* gate, const T* up, int64_t n, int64_t f, int64_t gs,
                                      int64_t us) {
  constexpr int P = rk::kVec<T>;
  for (int64_t r = blockIdx.x * int64_t(blockDim.y) + threadIdx.y; r < n; r += int64_t(gridDim.x) * blockDim.y) {
    for (int64_t j = int64_t(threadIdx.x) * P; j < f; j += int64_t(blockDim.x) * P) {
      float g[P], u[P];
      rk::load_f32<T, P>(gate + r * gs + j, g);
      rk::load_f32<T, P>(up + r * us + j, u);
#pragma unroll
      for (int e = 0; e < P; ++e) g[e] = rounded<T>(gate_act<GELU>(g[e])) * u[e];
      store_rounded<T, P>(out + r * f + j, g);
    }
  }
}

template <class T, bool GELU, bool ACT>
__global__ void swiglu_bwd_vec_kernel(T* dgate, T* dup, const T* dout, const T* gate, const T* up, T* act,
                                      int64_t n, int64_t f, int64_t gs, int64_t us, int64_t dgs, int64_t dus) {
  constexpr int P = rk::kVec<T>;
  for (int64_t r = blockIdx.x * int64_t(blockDim.y) + threadIdx.y; r < n; r += int64_t(gridDim.x) * blockDim.y) {
    for (int64_t j = int64_t(threadIdx.x) * P; j < f; j += int64_t(blockDim.x) * P) {
      float x[P], u[P], d[P], du[P];
      rk::load_f32<T, P>(gate + r * gs + j, x);
      rk::load_f32<T, P>(up + r * us + j, u);
      rk::load_f32<T, P>(dout + r * f + j, d);
#pragma unroll
      for (int e = 0; e < P; ++e) {
        const float s = rounded<T>(gate_act<GELU>(x[e]));
        const float ds = rounded<T>(d[e] * u[e]);
        du[e] = d[e] * s;
        x[e] = ds * gate_act_grad<GELU>(x[e]);
        if (ACT) u[e] *= s;  // the forward's s * up
      }
      store_rounded<T, P>(dup + r * dus + j, du);
      store_rounded<T, P>(dgate + r * dgs + j, x);
      if (ACT) store_rounded<T, P>(act + r * f + j, u);  // after dout's pack was read: act may be dout
    }
  }
}

// Whether every row of every operand starts 16-byte aligned and the width is whole packs.
template <class T> bool packable(int64_t f, std::initializer_list<const Tensor*> ts) {
  constexpr int P = rk::kVec<T>;
  if (f % P != 0) return false;
  for (const Tensor* t : ts)
    if (!rk::aligned16(t->raw_data()) || (t->size(0) > 1 && t->strides()[0] % P != 0)) return false;
  return true;
}

// The packed kernels' block: x threads over a row's packs (a multiple of 32 up to kThreads), as
// many rows in y as fill kThreads; a grid of the rows' blocks (grid-stride past 2^31 - 1).
struct RowBlocks {
  dim3 grid, block;
};
template <class T> RowBlocks row_blocks(int64_t n, int64_t f) {
  const int64_t packs = f / rk::kVec<T>;
  const int x = int(std::min<int64_t>(kThreads, (packs + 31) / 32 * 32)), y = kThreads / x;
  const int64_t blocks = std::min<int64_t>((n + y - 1) / y, int64_t(1) << 30);
  return {dim3(unsigned(blocks)), dim3(unsigned(x), unsigned(y))};
}

void check_rows(const Tensor& t, const Tensor& out, int dev, const char* op, const char* name) {
  LT_CHECK(t.defined() && t.device() == Device::cuda(dev) && t.dim() == 2 && t.shape() == out.shape() &&
               t.dtype() == out.dtype() && t.strides()[1] == 1,
           std::string(op) + ": " + name + " must be a " + dtype_name(out.dtype()) + " " + shape_str(out.shape()) +
               " tensor on cuda:" + std::to_string(dev) + " with unit stride along its rows",
           "the kernel indexes rows by their stride", "");
}

}  // namespace

void CudaBackend::swiglu_fwd(const Tensor& out, const Tensor& gate, const Tensor& up, bool gelu) {
  LT_CHECK(out.dim() == 2 && out.is_contiguous(), "swiglu_fwd: out must be a contiguous [N, F] tensor",
           "the kernel writes it densely", "");
  check_rows(gate, out, device_index_, "swiglu_fwd", "gate");
  check_rows(up, out, device_index_, "swiglu_fwd", "up");
  const int64_t n = out.size(0), f = out.size(1);
  if (n * f == 0) return;
  auto go = [&](auto tag, auto gtag) {
    using T = decltype(tag);
    constexpr bool G = decltype(gtag)::value;
    if (packable<T>(f, {&out, &gate, &up})) {
      const RowBlocks rb = row_blocks<T>(n, f);
      swiglu_fwd_vec_kernel<T, G><<<rb.grid, rb.block, 0, current_stream()>>>(
          out.data<T>(), gate.data<T>(), up.data<T>(), n, f, gate.strides()[0], up.strides()[0]);
      LT_CUDA_LAUNCH_CHECK("swiglu_fwd_vec_kernel");
      return;
    }
    swiglu_fwd_kernel<T, G><<<grid_for(n * f, kThreads), kThreads, 0, current_stream()>>>(
        out.data<T>(), gate.data<T>(), up.data<T>(), n, f, gate.strides()[0], up.strides()[0]);
    LT_CUDA_LAUNCH_CHECK("swiglu_fwd_kernel");
  };
  dispatch_float(out.dtype(), [&](auto tag) {
    if (gelu) go(tag, std::true_type{});
    else go(tag, std::false_type{});
  });
}

void CudaBackend::swiglu_bwd(const Tensor& dgate, const Tensor& dup, const Tensor& dout, const Tensor& gate,
                             const Tensor& up, bool gelu, const Tensor& act) {
  LT_CHECK(dout.dim() == 2 && dout.is_contiguous(), "swiglu_bwd: dout must be a contiguous [N, F] tensor",
           "the kernel reads it densely", "");
  for (auto [t, name] : {std::pair{&dgate, "dgate"}, {&dup, "dup"}, {&gate, "gate"}, {&up, "up"}})
    check_rows(*t, dout, device_index_, "swiglu_bwd", name);
  if (act.defined()) {
    LT_CHECK(act.is_contiguous(), "swiglu_bwd: act must be a contiguous [N, F] tensor", "the kernel writes it densely",
             "");
    check_rows(act, dout, device_index_, "swiglu_bwd", "act");
  }
  const int64_t n = dout.size(0), f = dout.size(1);
  if (n * f == 0) return;
  auto go = [&](auto tag, auto gtag) {
    using T = decltype(tag);
    constexpr bool G = decltype(gtag)::value;
    T* a = act.defined() ? act.data<T>() : nullptr;
    if (packable<T>(f, {&dgate, &dup, &dout, &gate, &up}) && (!a || packable<T>(f, {&act}))) {
      auto vec = a ? swiglu_bwd_vec_kernel<T, G, true> : swiglu_bwd_vec_kernel<T, G, false>;
      const RowBlocks rb = row_blocks<T>(n, f);
      vec<<<rb.grid, rb.block, 0, current_stream()>>>(
          dgate.data<T>(), dup.data<T>(), dout.data<T>(), gate.data<T>(), up.data<T>(), a, n, f, gate.strides()[0],
          up.strides()[0], dgate.strides()[0], dup.strides()[0]);
      LT_CUDA_LAUNCH_CHECK("swiglu_bwd_vec_kernel");
      return;
    }
    swiglu_bwd_kernel<T, G><<<grid_for(n * f, kThreads), kThreads, 0, current_stream()>>>(
        dgate.data<T>(), dup.data<T>(), dout.data<T>(), gate.data<T>(), up.data<T>(), a, n, f, gate.strides()[0],
        up.strides()[0], dgate.strides()[0], dup.strides()[0]);
    LT_CUDA_LAUNCH_CHECK("swiglu_bwd_kernel");
  };
  dispatch_float(dout.dtype(), [&](auto tag) {
    if (gelu) go(tag, std::true_type{});
    else go(tag, std::false_type{});
  });
}

}  // namespace lt
