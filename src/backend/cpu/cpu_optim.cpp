// Reference optimizer kernels: the exact update every backend must reproduce.
//
// AdamW (torch.optim.AdamW, amsgrad off), with g = grad * grad_scale and t = args.step:
//   p = p * (1 - lr*wd);  m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g*g
//   p = p - lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
// SGD (torch.optim.SGD), with g = grad * grad_scale:
//   g = g + wd*p;  buf = first_step ? g : momentum*buf + (1-dampening)*g   (when momentum != 0)
//   g = nesterov ? g + momentum*buf : buf;  p = p - lr*g
// Math is f32 (f64 when the parameter is f64, so tests can compare exactly with a reference);
// parameters and grads share one dtype, state tensors may have another (e.g. bf16 states).
// One rounding per f32 operation (no FMA contraction), as optim.cu's explicit _rn intrinsics, so
// both backends compute the same f32 update and stochastic rounding stores the same bits.
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_common.h"
#include "backend/cpu/cpu_sr.h"

#pragma GCC optimize("fp-contract=off")

namespace lt {
using namespace cpu;

namespace {

// Calls f(T{}, S{}) with the storage types of the parameter and the state.
template <class F> void dispatch_param_state(DType param, DType state, F&& f) {
  dispatch_float(param, [&](auto p) { dispatch_float(state, [&](auto s) { f(p, s); }); });
}

// Measure: also returns the gradient's sum of squares (double, element order, as sum_squares
// sums a tensor) and leaves the elements whose gradient is not finite as they were.
template <class T, class S, bool Measure>
double adamw_one(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const AdamWArgs& a,
                 const SrStream& sr) {
  using A = acc_t<T>;
  // Distinct tensors: restrict lets the compiler vectorise the loop.
  T* __restrict p = param.data<T>();
  const T* __restrict g = grad.data<T>();
  S* __restrict pm = m.data<S>();
  S* __restrict pv = v.data<S>();
  const A lr = a.lr, b1 = a.beta1, b2 = a.beta2, eps = a.eps, gs = a.grad_scale;
  const A decay = A(1) - lr * A(a.weight_decay);
  const A bc1 = A(1) - A(std::pow(double(a.beta1), double(a.step)));
  const A bc2_sqrt = A(std::sqrt(1.0 - std::pow(double(a.beta2), double(a.step))));
  const A step_size = lr / bc1;
  const int64_t n = param.numel();
  double sq = 0;
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (Measure) {
      const double raw = double(ld(g, i));
      sq += raw * raw;
      if (!std::isfinite(raw)) continue;
    }
    const A gi = A(ld(g, i)) * gs;
    const A mi = b1 * A(ld(pm, i)) + (A(1) - b1) * gi;
    const A vi = b2 * A(ld(pv, i)) + (A(1) - b2) * gi * gi;
    const A denom = std::sqrt(vi) / bc2_sqrt + eps;
    st_param(p, i, acc_t<T>(A(ld(p, i)) * decay - step_size * mi / denom), sr);
    st(pm, i, acc_t<S>(mi));
    st(pv, i, acc_t<S>(vi));
  }
  return sq;
}

template <class T, class S>
void sgd_one(const Tensor& param, const Tensor& grad, const Tensor& buf, const SgdArgs& a, const SrStream& sr) {
  using A = acc_t<T>;
  T* __restrict p = param.data<T>();
  const T* __restrict g = grad.data<T>();
  S* __restrict pb = buf.defined() ? buf.data<S>() : nullptr;
  const A lr = a.lr, mom = a.momentum, damp = a.dampening, wd = a.weight_decay, gs = a.grad_scale;
  const int64_t n = param.numel();
  for (int64_t i = 0; i < n; ++i) {
    const A pi = ld(p, i);
    A gi = A(ld(g, i)) * gs + wd * pi;
    if (pb) {
      const A bi = a.first_step ? gi : mom * A(ld(pb, i)) + (A(1) - damp) * gi;
      st(pb, i, acc_t<S>(bi));
      gi = a.nesterov ? gi + mom * bi : bi;
    }
    st_param(p, i, acc_t<T>(pi - lr * gi), sr);
  }
}

}  // namespace

void CpuBackend::adamw_step(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> m,
                            std::span<const Tensor> v, const AdamWArgs& args) {
  LT_ASSERT(grads.size() == params.size() && m.size() == params.size() && v.size() == params.size());
  LT_ASSERT(args.kept.empty() || args.kept.size() == params.size());
  const bool measure = args.sumsq.defined();
  LT_ASSERT(!measure || (args.sumsq.dtype() == DType::F32 && args.sumsq.numel() == 1));
  double total = 0;  // tensor by tensor, as sum_squares adds them
  for (size_t k = 0; k < params.size(); ++k) {
    dispatch_param_state(params[k].dtype(), m[k].dtype(), [&](auto t, auto s) {
      const SrStream sr = sr_stream_of(args.sr, params.size(), k);
      if (measure) total += adamw_one<decltype(t), decltype(s), true>(params[k], grads[k], m[k], v[k], args, sr);
      else adamw_one<decltype(t), decltype(s), false>(params[k], grads[k], m[k], v[k], args, sr);
    });
    if (!args.kept.empty() && args.kept[k].defined()) copy(args.kept[k], params[k]);  // the cast's rounding
  }
  if (measure) args.sumsq.data<float>()[0] += float(total);
}

void CpuBackend::sgd_step(std::span<const Tensor> params, std::span<const Tensor> grads,
                          std::span<const Tensor> momentum_bufs, const SgdArgs& args) {
  LT_ASSERT(grads.size() == params.size());
  LT_ASSERT(momentum_bufs.empty() || momentum_bufs.size() == params.size());
  for (size_t k = 0; k < params.size(); ++k) {
    Tensor buf = momentum_bufs.empty() ? Tensor() : momentum_bufs[k];
    DType sd = buf.defined() ? buf.dtype() : params[k].dtype();
    dispatch_param_state(params[k].dtype(), sd, [&](auto t, auto s) {
      sgd_one<decltype(t), decltype(s)>(params[k], grads[k], buf, args, sr_stream_of(args.sr, params.size(), k));
    });
  }
}

}  // namespace lt
