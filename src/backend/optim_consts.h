// Per-step constants of the Lion and 8-bit optimizer kernels, computed once on the host in
// double and rounded once, so the CPU and CUDA kernels start from identical numbers (a float
// 1 - lr*wd could be fused into an FMA by one compiler and not by another).
#pragma once
#include <cmath>

#include "backend/backend.h"

namespace lt {

template <class A> struct LionConsts {
  A lr, beta1, beta2, one_minus_beta1, one_minus_beta2, decay, grad_scale;
};
template <class A> LionConsts<A> lion_consts(const LionArgs& a) {
  const double lr = a.lr, b1 = a.beta1, b2 = a.beta2;
  return {A(lr), A(b1), A(b2), A(1.0 - b1), A(1.0 - b2), A(1.0 - lr * double(a.weight_decay)), A(a.grad_scale)};
}

// AdamW as cpu_optim.cpp: p = p*decay - step_size * m / (sqrt(v) / bc2_sqrt + eps).
struct AdamWConsts {
  float beta1, beta2, one_minus_beta1, one_minus_beta2, eps, decay, step_size, bc2_sqrt, grad_scale;
};
inline AdamWConsts adamw_consts(const AdamWArgs& a) {
  const double lr = a.lr, b1 = a.beta1, b2 = a.beta2, t = double(a.step);
  return {a.beta1,
          a.beta2,
          float(1.0 - b1),
          float(1.0 - b2),
          a.eps,
          float(1.0 - lr * double(a.weight_decay)),
          float(lr / (1.0 - std::pow(b1, t))),
          float(std::sqrt(1.0 - std::pow(b2, t))),
          a.grad_scale};
}

}  // namespace lt
