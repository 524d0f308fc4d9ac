// SwiGLU (and GeGLU: gelu_tanh for silu) on the CPU: out = silu(gate) * up, rounded as transformers' LlamaMLP computes
// act_fn(gate_proj(x)) * up_proj(x) with two torch ops: silu(gate) is rounded to the storage type
// before the product (a no-op for f32 and f64), and so are the backward's intermediate products.
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_common.h"

namespace lt {
using namespace cpu;

namespace {

template <class A> A sigmoid_of(A x) { return A(1) / (A(1) + std::exp(-x)); }

// gelu_pytorch_tanh: 0.5 x (1 + tanh(k (x + 0.044715 x^3))), k = sqrt(2 / pi).
template <class A> A gelu_tanh_of(A x) {
  return A(0.5) * x * (A(1) + std::tanh(A(0.7978845608028654) * (x + A(0.044715) * x * x * x)));
}
template <class A> A gelu_tanh_grad(A x) {
  const A k = A(0.7978845608028654), t = std::tanh(k * (x + A(0.044715) * x * x * x));
  return A(0.5) * (A(1) + t) + A(0.5) * x * (A(1) - t * t) * k * (A(1) + A(3 * 0.044715) * x * x);
}

// The gate's activation and its derivative: silu (SwiGLU) or the tanh GELU (GeGLU).
template <class A> A gate_act(A x, bool gelu) { return gelu ? gelu_tanh_of(x) : x / (A(1) + std::exp(-x)); }
template <class A> A gate_act_grad(A x, bool gelu) {
  if (gelu) return gelu_tanh_grad(x);
  const A sg = sigmoid_of(x);
  return sg * (A(1) + x * (A(1) - sg));
}

}  // namespace

void CpuBackend::swiglu_fwd(const Tensor& out, const Tensor& gate, const Tensor& up, bool gelu) {
  const int64_t n = out.size(0), f = out.size(1), gs = gate.strides()[0], us = up.strides()[0];
  dispatch_float(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const T* g = gate.data<T>();
    const T* u = up.data<T>();
    T* o = out.data<T>();
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < f; ++j) {
        const A x = ld(g, r * gs + j);
        const A s = rounded<T>(gate_act(x, gelu));
        st(o, r * f + j, s * ld(u, r * us + j));
      }
  });
}

void CpuBackend::swiglu_bwd(const Tensor& dgate, const Tensor& dup, const Tensor& dout, const Tensor& gate,
                            const Tensor& up, bool gelu, const Tensor& act) {
  const int64_t n = dout.size(0), f = dout.size(1);
  const int64_t gs = gate.strides()[0], us = up.strides()[0], dgs = dgate.strides()[0], dus = dup.strides()[0];
  dispatch_float(dout.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const T* g = gate.data<T>();
    const T* u = up.data<T>();
    const T* dy = dout.data<T>();
    T* dg = dgate.data<T>();
    T* du = dup.data<T>();
    T* a = act.defined() ? act.data<T>() : nullptr;  // may be dy: its element is read first
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < f; ++j) {
        const A x = ld(g, r * gs + j), d = ld(dy, r * f + j), uv = ld(u, r * us + j);
        const A s = rounded<T>(gate_act(x, gelu));
        const A ds = rounded<T>(d * uv);  // d(act(gate)), as torch's mul backward stores it
        st(du, r * dus + j, d * s);
        st(dg, r * dgs + j, ds * gate_act_grad(x, gelu));
        if (a) st(a, r * f + j, s * uv);
      }
  });
}

}  // namespace lt
