// Row-wise layer norm, RMS norm and softmax: x is [N, C], one row at a time. Each row is
// widened once into an accumulation-type buffer (f32, f64 for f64), so 16-bit storage
// rounds only on the final store. Variance is two-pass (sum of (x - mean)^2): it does
// not cancel catastrophically the way E[x^2] - E[x]^2 does for rows with a large mean.
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_common.h"
#include "backend/cpu/cpu_rms_rows.h"

namespace lt {
using namespace cpu;

namespace {

// Row count and width of a [..., C] operand.
struct Rows {
  int64_t n, c;
  explicit Rows(const Tensor& x) : n(0), c(x.size(-1)) { n = c ? x.numel() / c : 0; }
};

template <class T> void widen_row(std::vector<acc_t<T>>& buf, const T* p, int64_t c) {
  for (int64_t j = 0; j < c; ++j) buf[size_t(j)] = ld(p, j);
}

// A [C] vector in the accumulation type (all ones when undefined).
template <class T> std::vector<acc_t<T>> widen_vec(const Tensor& t, int64_t c, acc_t<T> fill) {
  std::vector<acc_t<T>> out(size_t(c), fill);
  if (t.defined()) widen_row(out, t.data<T>(), c);
  return out;
}

// A parameter gradient (dw, db): of x's dtype T, or f32 for 16-bit x (the sums unrounded).
template <class T> void store_vec(const Tensor& t, const std::vector<acc_t<T>>& v) {
  if (!t.defined()) return;
  constexpr bool narrow = std::is_same_v<T, bf16_t> || std::is_same_v<T, f16_t>;
  if (t.dtype() == DType::F32 && narrow) {
    float* p = t.data<float>();
    for (size_t j = 0; j < v.size(); ++j) p[j] = float(v[j]);
    return;
  }
  T* p = t.data<T>();
  for (size_t j = 0; j < v.size(); ++j) st(p, int64_t(j), v[j]);
}

}  // namespace

void CpuBackend::layernorm_fwd(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                               const Tensor& w, const Tensor& b, float eps) {
  const Rows r(x);
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const std::vector<A> wv = widen_vec<T>(w, r.c, A(1)), bv = widen_vec<T>(b, r.c, A(0));
    std::vector<A> row(size_t(r.c));
    A* pm = aux_data<A>(mean);
    A* pr = aux_data<A>(rstd);
    for (int64_t i = 0; i < r.n; ++i) {
      widen_row(row, x.data<T>() + i * r.c, r.c);
      A s = 0;
      for (A v : row) s += v;
      const A mu = s / A(r.c);
      A ss = 0;
      for (A v : row) ss += (v - mu) * (v - mu);
      const A rs = A(1) / std::sqrt(ss / A(r.c) + A(eps));
      T* py = y.data<T>() + i * r.c;
      for (int64_t j = 0; j < r.c; ++j) st(py, j, (row[size_t(j)] - mu) * rs * wv[size_t(j)] + bv[size_t(j)]);
      pm[i] = mu;
      pr[i] = rs;
    }
  });
}

// With xhat = (x - mean) * rstd and g = dy * w:
// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), dw = sum_rows dy * xhat, db = sum_rows dy.
void CpuBackend::layernorm_bwd(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dy,
                               const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd) {
  const Rows r(x);
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const std::vector<A> wv = widen_vec<T>(w, r.c, A(1));
    std::vector<A> xh(size_t(r.c)), g(size_t(r.c)), dwv(size_t(r.c), A(0)), dbv(size_t(r.c), A(0));
    const A* pm = aux_data<A>(mean);
    const A* pr = aux_data<A>(rstd);
    for (int64_t i = 0; i < r.n; ++i) {
      const T* px = x.data<T>() + i * r.c;
      const T* pdy = dy.data<T>() + i * r.c;
      A sg = 0, sgx = 0;
      for (int64_t j = 0; j < r.c; ++j) {
        const A d = ld(pdy, j);
        xh[size_t(j)] = (ld(px, j) - pm[i]) * pr[i];
        g[size_t(j)] = d * wv[size_t(j)];
        sg += g[size_t(j)];
        sgx += g[size_t(j)] * xh[size_t(j)];
        dwv[size_t(j)] += d * xh[size_t(j)];
        dbv[size_t(j)] += d;
      }
      sg /= A(r.c);
      sgx /= A(r.c);
      T* pdx = dx.data<T>() + i * r.c;
      for (int64_t j = 0; j < r.c; ++j) st(pdx, j, pr[i] * (g[size_t(j)] - sg - xh[size_t(j)] * sgx));
    }
    store_vec<T>(dw, dwv);
    store_vec<T>(db, dbv);
  });
}

}  // namespace lt

namespace lt::cpu {

// The row kernels of cpu_rms_rows.h: out of line, so every caller runs this one compiled body. The
// row sums are explicit fmas: left to the compiler, `s += a * b` was fused where a row's elements
// ran scalar (alignment peeling) and not where they ran vectorised, so a row's bits depended on its
// address. The elementwise products are the same in either path.
template <class T>
[[gnu::noinline]] acc_t<T> rms_row_fwd(T* y, const T* x, const acc_t<T>* w, int64_t c, float eps, acc_t<T>* buf) {
  using A = acc_t<T>;
  for (int64_t j = 0; j < c; ++j) buf[j] = ld(x, j);
  A ss = 0;
  for (int64_t j = 0; j < c; ++j) ss = std::fma(buf[j], buf[j], ss);
  const A rs = A(1) / std::sqrt(ss / A(c) + A(eps));
  for (int64_t j = 0; j < c; ++j) st(y, j, buf[j] * rs * w[j]);
  return rs;
}

template <class T>
[[gnu::noinline]] void rms_row_bwd(T* dx, acc_t<T>* dw, const T* dy, const T* x, const acc_t<T>* w, acc_t<T> r,
                                   int64_t c, acc_t<T>* xh, acc_t<T>* g) {
  using A = acc_t<T>;
  A sgx = 0;
  for (int64_t j = 0; j < c; ++j) {
    const A d = ld(dy, j);
    xh[j] = ld(x, j) * r;
    g[j] = d * w[j];
    sgx = std::fma(g[j], xh[j], sgx);
    dw[j] += d * xh[j];
  }
  sgx /= A(c);
  for (int64_t j = 0; j < c; ++j) st(dx, j, r * (g[j] - xh[j] * sgx));
}

#define LT_CPU_RMS_ROWS(T)                                                                                     \
  template acc_t<T> rms_row_fwd<T>(T*, const T*, const acc_t<T>*, int64_t, float, acc_t<T>*);                 \
  template void rms_row_bwd<T>(T*, acc_t<T>*, const T*, const T*, const acc_t<T>*, acc_t<T>, int64_t, acc_t<T>*, \
                               acc_t<T>*);
LT_CPU_RMS_ROWS(float)
LT_CPU_RMS_ROWS(double)
LT_CPU_RMS_ROWS(bf16_t)
LT_CPU_RMS_ROWS(f16_t)
#undef LT_CPU_RMS_ROWS

}  // namespace lt::cpu

namespace lt {
using namespace cpu;

void CpuBackend::rmsnorm_fwd(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& w, float eps,
                             float w_offset) {
  const Rows r(x);
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const std::vector<A> wv = rms_weight<T>(w, r.c, w_offset);
    std::vector<A> row(size_t(r.c));
    for (int64_t i = 0; i < r.n; ++i)
      aux_data<A>(rstd)[i] = rms_row_fwd(y.data<T>() + i * r.c, x.data<T>() + i * r.c, wv.data(), r.c, eps, row.data());
  });
}

// xhat = x * rstd, g = dy * w: dx = rstd * (g - xhat * mean(g * xhat)), dw = sum_rows dy * xhat.
void CpuBackend::rmsnorm_bwd(const Tensor& dx, const Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w,
                             const Tensor& rstd, float w_offset) {
  const Rows r(x);
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const std::vector<A> wv = rms_weight<T>(w, r.c, w_offset);
    std::vector<A> xh(size_t(r.c)), g(size_t(r.c)), dwv(size_t(r.c), A(0));
    const A* pr = aux_data<A>(rstd);
    for (int64_t i = 0; i < r.n; ++i)
      rms_row_bwd(dx.data<T>() + i * r.c, dwv.data(), dy.data<T>() + i * r.c, x.data<T>() + i * r.c, wv.data(), pr[i],
                  r.c, xh.data(), g.data());
    store_vec<T>(dw, dwv);
  });
}

// The fused residual add + norm, defined as exactly what add() and the norm compute apart:
// the sum is stored (rounded to the storage type) and normalised as stored, and the gradient
// of the sum is the norm's dx (rounded) plus the incoming one, added by the same add kernel.
// So on the CPU the fused op is bitwise the unfused pair (checkpointing modes that fuse and
// modes that do not give identical gradients); the GPU does each direction in one pass.
void CpuBackend::add_layernorm_fwd(const Tensor& sum, const Tensor& y, const Tensor& mean, const Tensor& rstd,
                                   const Tensor& x, const Tensor& r, const Tensor& w, const Tensor& b, float eps) {
  binary(BinaryOp::Add, sum, x, r);
  layernorm_fwd(y, mean, rstd, sum, w, b, eps);
}

void CpuBackend::add_layernorm_bwd(const Tensor& dsum, const Tensor& dw, const Tensor& db, const Tensor& dy,
                                   const Tensor& ds, const Tensor& sum, const Tensor& w, const Tensor& mean,
                                   const Tensor& rstd) {
  layernorm_bwd(dsum, dw, db, dy, sum, w, mean, rstd);
  if (ds.defined()) binary(BinaryOp::Add, dsum, dsum, ds);  // out may alias a
}

void CpuBackend::add_rmsnorm_fwd(const Tensor& sum, const Tensor& y, const Tensor& rstd, const Tensor& x,
                                 const Tensor& r, const Tensor& w, float eps, float w_offset) {
  binary(BinaryOp::Add, sum, x, r);
  rmsnorm_fwd(y, rstd, sum, w, eps, w_offset);
}

void CpuBackend::add_rmsnorm_bwd(const Tensor& dsum, const Tensor& dw, const Tensor& dy, const Tensor& ds,
                                 const Tensor& sum, const Tensor& w, const Tensor& rstd, float w_offset) {
  rmsnorm_bwd(dsum, dw, dy, sum, w, rstd, w_offset);
  if (ds.defined()) binary(BinaryOp::Add, dsum, dsum, ds);  // out may alias a
}

// A row that is all -inf (everything masked) gives zeros rather than 0/0.
void CpuBackend::softmax_fwd(const Tensor& y, const Tensor& x) {
  const Rows r(x);
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    std::vector<A> row(size_t(r.c));
    for (int64_t i = 0; i < r.n; ++i) {
      widen_row(row, x.data<T>() + i * r.c, r.c);
      A mx = -std::numeric_limits<A>::infinity();
      for (A v : row) mx = v > mx ? v : mx;
      T* py = y.data<T>() + i * r.c;
      if (mx == -std::numeric_limits<A>::infinity()) {
        for (int64_t j = 0; j < r.c; ++j) st(py, j, A(0));
        continue;
      }
      A s = 0;
      for (A& v : row) s += (v = std::exp(v - mx));
      for (int64_t j = 0; j < r.c; ++j) st(py, j, row[size_t(j)] / s);
    }
  });
}

// dx = y * (dy - sum(dy * y))
void CpuBackend::softmax_bwd(const Tensor& dx, const Tensor& dy, const Tensor& y) {
  const Rows r(y);
  dispatch_float(y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    for (int64_t i = 0; i < r.n; ++i) {
      const T* py = y.data<T>() + i * r.c;
      const T* pdy = dy.data<T>() + i * r.c;
      A dot = 0;
      for (int64_t j = 0; j < r.c; ++j) dot += ld(py, j) * ld(pdy, j);
      T* pdx = dx.data<T>() + i * r.c;
      for (int64_t j = 0; j < r.c; ++j) st(pdx, j, ld(py, j) * (ld(pdy, j) - dot));
    }
  });
}

}  // namespace lt
