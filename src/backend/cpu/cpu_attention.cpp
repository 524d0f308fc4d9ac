// Reference attention: for each (batch, head) the Tq x Tk scores live in host scratch and
// every product goes through BLAS (S = Q K^T, O = P V, and the four backward GEMMs), so the
// cost is the GEMMs plus O(Tq*Tk) elementwise work. 16-bit operands are widened to f32 once.
// A query that sees no key (all masked, or causal with Tq > Tk) outputs zeros and gets
// lse = +inf, so exp(s - lse) = 0 in the backward and its gradients vanish too.
#include <cblas.h>

#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_common.h"

namespace lt {
using namespace cpu;

namespace {

// Row-major C = alpha op(A) op(B) + beta C, in f32 or f64.
void blas(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, const float* b, float* c) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m), int(n), int(k),
              alpha, a, int(ta ? m : k), b, int(tb ? k : n), 0.0f, c, int(n));
}
void blas(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a, const double* b,
          double* c) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m), int(n), int(k),
              alpha, a, int(ta ? m : k), b, int(tb ? k : n), 0.0, c, int(n));
}

// One [rows, D] slice of a [B, H, T, D] tensor, in the accumulation type: a pointer into the
// tensor when it already has that type, else a widened copy.
template <class T> class Slice {
 public:
  using A = acc_t<T>;
  Slice(const Tensor& t, int64_t len) : t_(t), len_(len) {
    if (!t.defined()) return;
    if constexpr (!std::is_same_v<T, A>) buf_.resize(size_t(len));
  }
  const A* load(int64_t bh) {
    const T* p = t_.data<T>() + bh * len_;
    if constexpr (std::is_same_v<T, A>) {
      return p;
    } else {
      for (int64_t i = 0; i < len_; ++i) buf_[size_t(i)] = ld(p, i);
      return buf_.data();
    }
  }

 private:
  const Tensor& t_;
  int64_t len_;
  std::vector<A> buf_;
};

template <class T, class A> void store_slice(const Tensor& t, int64_t bh, const std::vector<A>& v) {
  T* p = t.data<T>() + bh * int64_t(v.size());
  for (size_t i = 0; i < v.size(); ++i) st(p, int64_t(i), v[i]);
}

// The keys query i may see: j <= last and mask[j] != 0.
struct Visibility {
  const uint8_t* mask;  // [Tk] for this batch, or nullptr
  int64_t tq, tk;
  bool causal;
  int64_t last(int64_t i) const { return causal ? i + tk - tq : tk - 1; }
  bool sees(int64_t i, int64_t j) const { return j <= last(i) && (!mask || mask[j]); }
};

// Scores s (scaled) -> probabilities in place; returns lse (+inf when nothing is visible).
template <class A> A softmax_row(A* s, int64_t i, const Visibility& vis) {
  const A inf = std::numeric_limits<A>::infinity();
  A mx = -inf;
  for (int64_t j = 0; j < vis.tk; ++j)
    if (vis.sees(i, j) && s[j] > mx) mx = s[j];
  if (mx == -inf) {
    for (int64_t j = 0; j < vis.tk; ++j) s[j] = 0;
    return inf;
  }
  A sum = 0;
  for (int64_t j = 0; j < vis.tk; ++j) sum += (s[j] = vis.sees(i, j) ? std::exp(s[j] - mx) : A(0));
  for (int64_t j = 0; j < vis.tk; ++j) s[j] /= sum;
  return mx + std::log(sum);
}

struct Dims {
  int64_t b, h, tq, tk, d;
  explicit Dims(const Tensor& q, const Tensor& k) : b(q.size(0)), h(q.size(1)), tq(q.size(2)), tk(k.size(2)), d(q.size(3)) {}
  Visibility vis(const Tensor& mask, int64_t bh, bool causal) const {
    const uint8_t* m = mask.defined() ? mask.data<uint8_t>() + (bh / h) * tk : nullptr;
    return {m, tq, tk, causal};
  }
};

}  // namespace

void CpuBackend::attention_fwd(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                               const Tensor& v, const Tensor& mask, bool causal, float scale) {
  const Dims n(q, k);
  dispatch_float(q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    Slice<T> qs(q, n.tq * n.d), ks(k, n.tk * n.d), vs(v, n.tk * n.d);
    std::vector<A> s(size_t(n.tq * n.tk)), o(size_t(n.tq * n.d));
    A* plse = aux_data<A>(lse);
    for (int64_t bh = 0; bh < n.b * n.h; ++bh) {
      const Visibility vis = n.vis(mask, bh, causal);
      blas(false, true, n.tq, n.tk, n.d, A(scale), qs.load(bh), ks.load(bh), s.data());
      for (int64_t i = 0; i < n.tq; ++i) plse[bh * n.tq + i] = softmax_row(s.data() + i * n.tk, i, vis);
      blas(false, false, n.tq, n.d, n.tk, A(1), s.data(), vs.load(bh), o.data());
      store_slice<T>(out, bh, o);
    }
  });
}

// With P = exp(scale QK^T - lse): dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(P dP)),
// dQ = scale dS K, dK = scale dS^T Q. rowsum(P dP) equals rowsum(dO * O) but is computed from
// P here, so the reference does not depend on O's rounding.
void CpuBackend::attention_bwd(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                               const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                               const Tensor& lse, const Tensor& mask, bool causal, float scale) {
  const Dims n(q, k);
  dispatch_float(q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    Slice<T> qs(q, n.tq * n.d), ks(k, n.tk * n.d), vs(v, n.tk * n.d), dos(dout, n.tq * n.d);
    std::vector<A> p(size_t(n.tq * n.tk)), dp(size_t(n.tq * n.tk));
    std::vector<A> gq(size_t(n.tq * n.d)), gk(size_t(n.tk * n.d)), gv(size_t(n.tk * n.d));
    const A* plse = aux_data<A>(lse);
    for (int64_t bh = 0; bh < n.b * n.h; ++bh) {
      const Visibility vis = n.vis(mask, bh, causal);
      const A* qp = qs.load(bh);
      const A* kp = ks.load(bh);
      const A* vp = vs.load(bh);
      const A* dop = dos.load(bh);
      blas(false, true, n.tq, n.tk, n.d, A(scale), qp, kp, p.data());
      for (int64_t i = 0; i < n.tq; ++i) {
        const A l = plse[bh * n.tq + i];
        A* row = p.data() + i * n.tk;
        for (int64_t j = 0; j < n.tk; ++j) row[j] = vis.sees(i, j) ? std::exp(row[j] - l) : A(0);
      }
      blas(true, false, n.tk, n.d, n.tq, A(1), p.data(), dop, gv.data());
      blas(false, true, n.tq, n.tk, n.d, A(1), dop, vp, dp.data());
      for (int64_t i = 0; i < n.tq; ++i) {
        A* pr = p.data() + i * n.tk;
        A* dr = dp.data() + i * n.tk;
        A dot = 0;
        for (int64_t j = 0; j < n.tk; ++j) dot += pr[j] * dr[j];
        for (int64_t j = 0; j < n.tk; ++j) dr[j] = pr[j] * (dr[j] - dot);  // dS, in place
      }
      blas(false, false, n.tq, n.d, n.tk, A(scale), dp.data(), kp, gq.data());
      blas(true, false, n.tk, n.d, n.tq, A(scale), dp.data(), qp, gk.data());
      store_slice<T>(dq, bh, gq);
      store_slice<T>(dk, bh, gk);
      store_slice<T>(dv, bh, gv);
    }
  });
}

}  // namespace lt
