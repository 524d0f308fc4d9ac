// Float64 finite-difference gradient check. For L = <f(inputs), R> with a fixed random R,
// autograd's dL/dx (from f(inputs).backward(R)) must match the central difference
// (L(x + eps) - L(x - eps)) / 2eps for every element of every input that requires grad.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <sstream>
#include <vector>

#include "leantrain/autograd.h"
#include "leantrain/ops.h"

namespace lt::test {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-7;
  double rtol = 1e-5;
};

using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;

// A contiguous f64 CPU tensor of N(0, 1) values (requires grad).
inline Tensor rand64(const Shape& shape, uint64_t seed, double lo = 0, double hi = 0) {
  Generator gen(seed);
  Tensor t = hi > lo ? rand_uniform(shape, gen, float(lo), float(hi), DType::F64)
                     : randn(shape, gen, 1.0f, DType::F64);
  t.set_requires_grad(true);
  return t;
}

inline double dot(const Tensor& y, const std::vector<double>& r) {
  std::vector<double> v = y.to_double_vector();
  double s = 0;
  for (size_t i = 0; i < v.size(); ++i) s += v[i] * r[i];
  return s;
}

// inputs: contiguous f64 CPU tensors; those with requires_grad are checked (and perturbed in place).
inline ::testing::AssertionResult gradcheck(const OpFn& f, const std::vector<Tensor>& inputs,
                                            GradcheckOptions opt = {}) {
  for (const Tensor& x : inputs) {
    if (!x.requires_grad()) continue;
    if (x.dtype() != DType::F64 || !x.device().is_cpu() || !x.is_contiguous())
      return ::testing::AssertionFailure() << "gradcheck needs contiguous f64 cpu inputs";
    x.impl()->grad.reset();
  }
  Tensor y = f(inputs);
  if (!y.requires_grad()) return ::testing::AssertionFailure() << "output does not require grad";
  if (y.dtype() != DType::F64) return ::testing::AssertionFailure() << "output is not f64";
  Generator gen(0x5eed);
  Tensor r = randn(y.shape(), gen, 1.0f, DType::F64);
  const std::vector<double> rv = r.to_double_vector();
  y.backward(r);
  y = Tensor();
  NoGradGuard ng;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& x = inputs[k];
    if (!x.requires_grad()) continue;
    std::vector<double> analytic(size_t(x.numel()), 0.0);
    if (x.grad().defined()) {
      if (x.grad().shape() != x.shape())
        return ::testing::AssertionFailure() << "input " << k << ": grad shape " << shape_str(x.grad().shape())
                                             << " != " << shape_str(x.shape());
      analytic = x.grad().to_double_vector();
    }
    double* p = x.data<double>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double saved = p[i];
      p[i] = saved + opt.eps;
      const double up = dot(f(inputs), rv);
      p[i] = saved - opt.eps;
      const double down = dot(f(inputs), rv);
      p[i] = saved;
      const double numeric = (up - down) / (2 * opt.eps);
      const double a = analytic[size_t(i)];
      if (!(std::abs(a - numeric) <= opt.atol + opt.rtol * std::abs(numeric)))
        return ::testing::AssertionFailure() << "input " << k << " element " << i << ": analytic " << a
                                             << ", numeric " << numeric << (x.grad().defined() ? "" : " (no grad)");
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace lt::test
