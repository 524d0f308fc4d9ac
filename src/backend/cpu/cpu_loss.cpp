// Cross-entropy from logits, one row at a time: loss = lse - x[target] with
// lse = max + log(sum exp(x - max)). The backward rebuilds softmax from the saved lse, so
// probabilities never exist beyond the row being processed. Rows may be padded apart (the
// row stride is strides()[0]); the padding is neither read nor written.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_common.h"

namespace lt {
using namespace cpu;

namespace {

// Elements between the starts of two rows of an [N, V] operand (padded rows allowed).
int64_t row_step(const Tensor& t) { return t.size(0) > 1 ? t.strides()[0] : t.size(1); }

}  // namespace

void CpuBackend::cross_entropy_fwd(const Tensor& loss, const Tensor& lse, const Tensor& logits, const Tensor& targets,
                                   int64_t ignore_index) {
  const int64_t n = logits.size(0), v = logits.size(1), step = row_step(logits);
  dispatch_float(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    A* pl = aux_data<A>(loss);
    A* plse = aux_data<A>(lse);
    std::vector<A> row(static_cast<size_t>(v));
    for (int64_t i = 0; i < n; ++i) {
      const T* px = logits.data<T>() + i * step;
      A mx = ld(px, 0);
      for (int64_t j = 0; j < v; ++j) mx = std::max(mx, row[size_t(j)] = ld(px, j));
      A s = 0;
      for (A x : row) s += std::exp(x - mx);
      plse[i] = mx + std::log(s);
      const int64_t t = load_index(targets, i);
      if (t == ignore_index) {
        pl[i] = 0;
        continue;
      }
      LT_ASSERT(t >= 0 && t < v);
      pl[i] = plse[i] - row[size_t(t)];
    }
  });
}

namespace {

// dlogits = (softmax - onehot(target)) * scale(row); ignored rows get 0. Each element is read
// before it is written, so dlogits may be the logits.
template <class Scale>
void write_dlogits(const Tensor& dlogits, const Tensor& logits, const Tensor& lse, const Tensor& targets,
                   int64_t ignore_index, Scale&& scale) {
  const int64_t n = logits.size(0), v = logits.size(1), step = row_step(logits), dstep = row_step(dlogits);
  dispatch_float(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const A* plse = aux_data<A>(lse);
    for (int64_t i = 0; i < n; ++i) {
      const T* px = logits.data<T>() + i * step;
      T* pg = dlogits.data<T>() + i * dstep;
      const int64_t t = load_index(targets, i);
      const A d = t == ignore_index ? A(0) : A(scale(A{}, i));
      for (int64_t j = 0; j < v; ++j) st(pg, j, d * (std::exp(ld(px, j) - plse[i]) - A(j == t ? 1 : 0)));
    }
  });
}

}  // namespace

// dlogits = (softmax - onehot(target)) * dloss[row]; ignored rows get 0.
void CpuBackend::cross_entropy_bwd(const Tensor& dlogits, const Tensor& dloss, const Tensor& logits,
                                   const Tensor& lse, const Tensor& targets, int64_t ignore_index) {
  write_dlogits(dlogits, logits, lse, targets, ignore_index,
                [&](auto a, int64_t i) { return aux_data<decltype(a)>(dloss)[i]; });
}

// The forward, then each row's gradient written over its logits.
void CpuBackend::cross_entropy_fwd_bwd(const Tensor& loss, const Tensor& lse, const Tensor& logits,
                                       const Tensor& targets, int64_t ignore_index, float grad_scale) {
  cross_entropy_fwd(loss, lse, logits, targets, ignore_index);
  write_dlogits(logits, logits, lse, targets, ignore_index, [&](auto a, int64_t) { return decltype(a)(grad_scale); });
}

void CpuBackend::scale_rows(const Tensor& x, const Tensor& s) {
  const int64_t n = x.size(0), v = x.size(1), step = row_step(x);
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const A k = aux_data<A>(s)[0];
    for (int64_t i = 0; i < n; ++i) {
      T* px = x.data<T>() + i * step;
      for (int64_t j = 0; j < v; ++j) st(px, j, k * ld(px, j));
    }
  });
}

}  // namespace lt
