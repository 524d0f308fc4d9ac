#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_common.h"
#include "leantrain/random.h"

namespace lt {
using namespace cpu;

namespace {

template <class A> A apply_binary(BinaryOp op, A x, A y) {
  switch (op) {
    case BinaryOp::Add: return x + y;
    case BinaryOp::Sub: return x - y;
    case BinaryOp::Mul: return x * y;
    case BinaryOp::Div: return x / y;
  }
  return 0;
}

template <class A> A gelu_tanh_inner(A x) { return A(0.7978845608028654) * (x + A(0.044715) * x * x * x); }

template <class A> A apply_unary(UnaryOp op, A x, A alpha) {
  switch (op) {
    case UnaryOp::Scale: return x * alpha;
    case UnaryOp::AddScalar: return x + alpha;
    case UnaryOp::Neg: return -x;
    case UnaryOp::Exp: return std::exp(x);
    case UnaryOp::Log: return std::log(x);
    case UnaryOp::Sqrt: return std::sqrt(x);
    case UnaryOp::Rsqrt: return A(1) / std::sqrt(x);
    case UnaryOp::Square: return x * x;
    case UnaryOp::Tanh: return std::tanh(x);
    case UnaryOp::Sigmoid: return A(1) / (A(1) + std::exp(-x));
    case UnaryOp::Relu: return x > A(0) ? x : A(0);
    case UnaryOp::GeluTanh: return A(0.5) * x * (A(1) + std::tanh(gelu_tanh_inner(x)));
    case UnaryOp::GeluErf: return A(0.5) * x * (A(1) + std::erf(x * A(0.7071067811865476)));
    case UnaryOp::Silu: return x / (A(1) + std::exp(-x));
    case UnaryOp::PowScalar: return std::pow(x, alpha);
    case UnaryOp::LogSigmoid: return std::min(x, A(0)) - std::log1p(std::exp(-std::abs(x)));
  }
  return 0;
}

// d op(x) / dx
template <class A> A derivative(UnaryOp op, A x, A alpha) {
  switch (op) {
    case UnaryOp::Scale: return alpha;
    case UnaryOp::AddScalar: return A(1);
    case UnaryOp::Neg: return A(-1);
    case UnaryOp::Exp: return std::exp(x);
    case UnaryOp::Log: return A(1) / x;
    case UnaryOp::Sqrt: return A(0.5) / std::sqrt(x);
    case UnaryOp::Rsqrt: return A(-0.5) / (x * std::sqrt(x));
    case UnaryOp::Square: return A(2) * x;
    case UnaryOp::Tanh: { A t = std::tanh(x); return A(1) - t * t; }
    case UnaryOp::Sigmoid: { A s = A(1) / (A(1) + std::exp(-x)); return s * (A(1) - s); }
    case UnaryOp::Relu: return x > A(0) ? A(1) : A(0);
    case UnaryOp::GeluTanh: {
      A t = std::tanh(gelu_tanh_inner(x));
      A dinner = A(0.7978845608028654) * (A(1) + A(3 * 0.044715) * x * x);
      return A(0.5) * (A(1) + t) + A(0.5) * x * (A(1) - t * t) * dinner;
    }
    case UnaryOp::GeluErf: {
      A cdf = A(0.5) * (A(1) + std::erf(x * A(0.7071067811865476)));
      A pdf = std::exp(A(-0.5) * x * x) * A(0.3989422804014327);
      return cdf + x * pdf;
    }
    case UnaryOp::Silu: { A s = A(1) / (A(1) + std::exp(-x)); return s * (A(1) + x * (A(1) - s)); }
    case UnaryOp::PowScalar: return alpha * std::pow(x, alpha - A(1));
    case UnaryOp::LogSigmoid: return A(1) / (A(1) + std::exp(x));  // sigmoid(-x)
  }
  return 0;
}

}  // namespace

void CpuBackend::binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  const int64_t n = out.numel();
  const Shape& shape = out.shape();
  const bool ac = a.is_contiguous(), bc = b.is_contiguous();
  // Common fast path: b broadcast along leading dims over a contiguous a (bias add, row scale).
  const int64_t last = shape.empty() ? 1 : shape.back();
  const bool b_row = !bc && b.dim() >= 1 && b.strides().back() == 1 && [&] {
    for (int64_t d = 0; d + 1 < b.dim(); ++d)
      if (b.strides()[size_t(d)] != 0 && b.shape()[size_t(d)] != 1) return false;
    return true;
  }();
  dispatch_float(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    T* o = out.data<T>();
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    if (ac && bc) {
      for (int64_t i = 0; i < n; ++i) st(o, i, apply_binary<A>(op, ld(pa, i), ld(pb, i)));
    } else if (ac && b_row) {
      for (int64_t i = 0; i < n; ++i) st(o, i, apply_binary<A>(op, ld(pa, i), ld(pb, i % last)));
    } else {
      for (int64_t i = 0; i < n; ++i) {
        int64_t ia = ac ? i : strided_offset(i, shape, a.strides());
        int64_t ib = bc ? i : strided_offset(i, shape, b.strides());
        st(o, i, apply_binary<A>(op, ld(pa, ia), ld(pb, ib)));
      }
    }
  });
}

void CpuBackend::unary(UnaryOp op, const Tensor& out, const Tensor& x, float alpha) {
  const int64_t n = out.numel();
  dispatch_float(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    T* o = out.data<T>();
    const T* px = x.data<T>();
    for (int64_t i = 0; i < n; ++i) st(o, i, apply_unary<A>(op, ld(px, i), A(alpha)));
  });
}

void CpuBackend::unary_backward(UnaryOp op, const Tensor& dx, const Tensor& dy, const Tensor& x, float alpha) {
  const int64_t n = dx.numel();
  dispatch_float(dx.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    T* o = dx.data<T>();
    const T* pdy = dy.data<T>();
    const T* px = x.defined() ? x.data<T>() : nullptr;
    for (int64_t i = 0; i < n; ++i) st(o, i, ld(pdy, i) * derivative<A>(op, px ? ld(px, i) : A(0), A(alpha)));
  });
}

void CpuBackend::dropout(const Tensor& out, const Tensor& x, float p, uint64_t seed, uint64_t offset) {
  const int64_t n = out.numel();
  dispatch_float(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    T* o = out.data<T>();
    const T* px = x.data<T>();
    const A keep_scale = A(1) / (A(1) - A(p));
    for (int64_t i = 0; i < n; ++i) {
      bool keep = rng_uniform(seed, offset + uint64_t(i)) >= p;
      st(o, i, keep ? ld(px, i) * keep_scale : A(0));
    }
  });
}

}  // namespace lt
