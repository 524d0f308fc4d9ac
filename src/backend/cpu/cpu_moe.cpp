// Mixture-of-experts ops on the CPU: the reference the CUDA kernels are checked against. The
// router follows transformers' *TopKRouter (softmax in f32, torch.topk's order, the f32
// renormalisation), the combine its index_add_ of each expert's rows in expert order; the
// grouped GEMMs run BLAS once per expert segment (the CPU is the reference, not the fast path).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_common.h"
#include "backend/moe_kernels.h"

namespace lt {
using namespace cpu;

namespace {

// Probability-typed data (f32, or f64 for f64 gradchecks).
template <class F> void dispatch_prob(DType t, F&& f) {
  if (t == DType::F64) return f(double{});
  LT_ASSERT(t == DType::F32);
  f(float{});
}

// v stored as T (rounded once).
template <class T> T rounded_to(acc_t<T> v) {
  T t{};
  st(&t, 0, v);
  return t;
}

// The token's k slots in increasing expert order.
std::vector<int64_t> expert_order(const int32_t* idx, int64_t k) {
  std::vector<int64_t> order(static_cast<size_t>(k));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return idx[a] < idx[b]; });
  return order;
}

const int32_t* offsets_of(const Tensor& offsets) { return offsets.data<int32_t>(); }

}  // namespace

void CpuMoeKernels::moe_route_fwd(const Tensor& weights, const Tensor& idx, const Tensor& probs, const Tensor& logits,
                               bool renorm) {
  const int64_t n = logits.size(0), e = logits.size(1), k = idx.size(1);
  int32_t* ix = idx.data<int32_t>();
  dispatch_float(logits.dtype(), [&](auto ltag) {
    using L = decltype(ltag);
    const L* z = logits.data<L>();
    dispatch_prob(probs.dtype(), [&](auto ptag) {
      using P = decltype(ptag);
      P* p = probs.data<P>();
      std::vector<int64_t> order(static_cast<size_t>(e));
      for (int64_t r = 0; r < n; ++r) {
        P mx = -INFINITY;
        for (int64_t c = 0; c < e; ++c) mx = std::max(mx, P(ld(z, r * e + c)));
        P sum = 0;
        for (int64_t c = 0; c < e; ++c) sum += std::exp(P(ld(z, r * e + c)) - mx);
        for (int64_t c = 0; c < e; ++c) p[r * e + c] = std::exp(P(ld(z, r * e + c)) - mx) / sum;
        // Descending, ties to the lower expert (stable over ascending indices).
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[r * e + a] > p[r * e + b]; });
        P total = 0;
        for (int64_t j = 0; j < k; ++j) total += p[r * e + order[size_t(j)]];
        dispatch_float(weights.dtype(), [&](auto wtag) {
          using W = decltype(wtag);
          W* w = weights.data<W>();
          for (int64_t j = 0; j < k; ++j) {
            const int64_t c = order[size_t(j)];
            ix[r * k + j] = int32_t(c);
            const P v = renorm ? p[r * e + c] / total : p[r * e + c];
            st(w, r * k + j, acc_t<W>(v));
          }
        });
      }
    });
  });
}

void CpuMoeKernels::moe_route_bwd(const Tensor& dlogits, const Tensor& dweights, const Tensor& probs, const Tensor& idx,
                               bool renorm, const Tensor& aux, const Tensor& token_mask) {
  const int64_t n = probs.size(0), e = probs.size(1), k = idx.size(1);
  const int32_t* ix = idx.data<int32_t>();
  const uint8_t* mask = token_mask.defined() ? token_mask.data<uint8_t>() : nullptr;
  dispatch_prob(probs.dtype(), [&](auto ptag) {
    using P = decltype(ptag);
    const P* p = probs.data<P>();
    const P* ag = aux.defined() ? aux.data<P>() : nullptr;
    dispatch_float(dweights.dtype(), [&](auto wtag) {
      using W = decltype(wtag);
      const W* dw = dweights.data<W>();
      dispatch_float(dlogits.dtype(), [&](auto ltag) {
        using L = decltype(ltag);
        L* dz = dlogits.data<L>();
        std::vector<P> dp(static_cast<size_t>(e));
        for (int64_t r = 0; r < n; ++r) {
          std::fill(dp.begin(), dp.end(), P(0));
          if (ag && (!mask || mask[r]))
            for (int64_t c = 0; c < e; ++c) dp[size_t(c)] = ag[c];
          P total = 0, dot = 0;
          for (int64_t j = 0; j < k; ++j) {
            const P v = p[r * e + ix[r * k + j]];
            total += v;
            dot += P(ld(dw, r * k + j)) * v;
          }
          for (int64_t j = 0; j < k; ++j) {
            const P g = P(ld(dw, r * k + j));
            // w_j = v_j / S: dv_j = (g_j - sum_l g_l v_l / S) / S
            dp[size_t(ix[r * k + j])] += renorm ? (g - dot / total) / total : g;
          }
          P s = 0;
          for (int64_t c = 0; c < e; ++c) s += p[r * e + c] * dp[size_t(c)];
          for (int64_t c = 0; c < e; ++c) st(dz, r * e + c, acc_t<L>(p[r * e + c] * (dp[size_t(c)] - s)));
        }
      });
    });
  });
}

void CpuMoeKernels::moe_route_stats(const Tensor& psum, const Tensor& counts, const Tensor& probs, const Tensor& idx,
                                 const Tensor& token_mask) {
  const int64_t n = probs.size(0), e = probs.size(1), k = idx.size(1);
  const int32_t* ix = idx.data<int32_t>();
  const uint8_t* mask = token_mask.defined() ? token_mask.data<uint8_t>() : nullptr;
  dispatch_prob(probs.dtype(), [&](auto ptag) {
    using P = decltype(ptag);
    const P* p = probs.data<P>();
    P* ps = psum.data<P>();
    P* cs = counts.data<P>();
    for (int64_t c = 0; c < e; ++c) {
      P s = 0, cnt = 0;
      for (int64_t r = 0; r < n; ++r) {
        if (mask && !mask[r]) continue;
        s += p[r * e + c];
        for (int64_t j = 0; j < k; ++j) cnt += ix[r * k + j] == c ? P(1) : P(0);
      }
      ps[c] += s;
      cs[c] += cnt;
    }
  });
}

void CpuMoeKernels::moe_sort(const Tensor& offsets, const Tensor& rows, const Tensor& pos, const Tensor& idx) {
  const int64_t r = idx.numel(), e = offsets.numel() - 1;
  const int32_t* ix = idx.data<int32_t>();
  int32_t* off = offsets.data<int32_t>();
  int32_t* rw = rows.data<int32_t>();
  int32_t* ps = pos.data<int32_t>();
  std::vector<int64_t> count(size_t(e), 0);
  for (int64_t i = 0; i < r; ++i) {
    LT_CHECK(ix[i] >= 0 && ix[i] < e, "moe_sort: expert index " + std::to_string(ix[i]),
             "experts are numbered 0 .. " + std::to_string(e - 1), "route to existing experts");
    ++count[size_t(ix[i])];
  }
  off[0] = 0;
  for (int64_t c = 0; c < e; ++c) off[c + 1] = int32_t(off[c] + count[size_t(c)]);
  std::vector<int64_t> next(off, off + e);
  for (int64_t i = 0; i < r; ++i) {
    const int64_t p = next[size_t(ix[i])]++;
    rw[p] = int32_t(i);
    ps[i] = int32_t(p);
  }
}

void CpuMoeKernels::moe_gather(const Tensor& out, const Tensor& x, const Tensor& rows, int64_t k) {
  const int64_t r = out.size(0), c = out.size(1);
  const int32_t* rw = rows.data<int32_t>();
  const size_t bytes = size_t(c) * dtype_size(x.dtype());
  const auto* src = static_cast<const uint8_t*>(x.raw_data());
  auto* dst = static_cast<uint8_t*>(out.raw_data());
  for (int64_t i = 0; i < r; ++i) std::copy_n(src + size_t(rw[i] / k) * bytes, bytes, dst + size_t(i) * bytes);
}

void CpuMoeKernels::moe_gather_bwd(const Tensor& dx, const Tensor& dout, const Tensor& pos, int64_t k) {
  const int64_t n = dx.size(0), c = dx.size(1);
  const int32_t* ps = pos.data<int32_t>();
  dispatch_float(dx.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const T* g = dout.data<T>();
    T* d = dx.data<T>();
    for (int64_t t = 0; t < n; ++t)
      for (int64_t col = 0; col < c; ++col) {
        A s = 0;
        for (int64_t j = 0; j < k; ++j) s += ld(g, int64_t(ps[t * k + j]) * c + col);
        st(d, t * c + col, s);
      }
  });
}

void CpuMoeKernels::grouped_gemm(const Tensor& c, const Tensor& a, const Tensor& w, bool trans_w, const Tensor& offsets,
                                 float alpha, bool accumulate) {
  const int64_t e = w.size(0), kdim = a.size(1), n = c.size(1);
  const int32_t* off = offsets_of(offsets);
  const int64_t w_stride = w.size(1) * w.size(2);
  for (int64_t x = 0; x < e; ++x) {
    const int64_t m = off[x + 1] - off[x];
    if (m == 0) continue;
    GemmDesc d;
    d.m = m, d.n = n, d.k = kdim, d.trans_b = trans_w, d.alpha = alpha, d.beta = accumulate ? 1.0f : 0.0f;
    backend_for(Device::cpu()).gemm(make_view(c, {m, n}, {n, 1}, c.offset() + off[x] * n), make_view(a, {m, kdim}, {kdim, 1}, a.offset() + off[x] * kdim),
         make_view(w, {w.size(1), w.size(2)}, {w.size(2), 1}, w.offset() + x * w_stride), d, Tensor());
  }
}

void CpuMoeKernels::grouped_gemm_pair(const Tensor& c, const Tensor& a, const Tensor& w, bool trans_w,
                                      const Tensor& a2, const Tensor& w2, bool trans_w2, const Tensor& offsets) {
  if (c.dtype() == DType::F32 || c.dtype() == DType::F64) {  // the sum kept in c's own precision
    grouped_gemm(c, a, w, trans_w, offsets, 1.0f, false);
    grouped_gemm(c, a2, w2, trans_w2, offsets, 1.0f, true);
    return;
  }
  // 16-bit: both products summed in f32 (the operands widened exactly), rounded once at the end.
  Backend& be = backend_for(Device::cpu());
  auto wide = [&](const Tensor& t) {
    Tensor o = Tensor::empty(t.shape(), DType::F32, Device::cpu());
    be.copy(o, t);
    return o;
  };
  Tensor c32 = Tensor::empty(c.shape(), DType::F32, Device::cpu());
  grouped_gemm(c32, wide(a), wide(w), trans_w, offsets, 1.0f, false);
  grouped_gemm(c32, wide(a2), wide(w2), trans_w2, offsets, 1.0f, true);
  be.copy(c, c32);
}

void CpuMoeKernels::grouped_gemm_wgrad(const Tensor& c, const Tensor& a, const Tensor& b, const Tensor& offsets,
                                       float alpha) {
  const int64_t e = c.size(0), n1 = c.size(1), n2 = c.size(2);
  const int32_t* off = offsets_of(offsets);
  for (int64_t x = 0; x < e; ++x) {
    const int64_t m = off[x + 1] - off[x];
    Tensor cx = make_view(c, {n1, n2}, {n2, 1}, c.offset() + x * n1 * n2);
    if (m == 0) {
      backend_for(Device::cpu()).fill(cx, 0.0);
      continue;
    }
    GemmDesc d;
    d.m = n1, d.n = n2, d.k = m, d.trans_a = true, d.alpha = alpha;
    backend_for(Device::cpu()).gemm(cx, make_view(a, {m, n1}, {n1, 1}, a.offset() + off[x] * n1), make_view(b, {m, n2}, {n2, 1}, b.offset() + off[x] * n2),
         d, Tensor());
  }
}

void CpuMoeKernels::moe_combine(const Tensor& out, const Tensor& ys, const Tensor& w, const Tensor& idx, const Tensor& pos) {
  const int64_t n = out.size(0), c = out.size(1), k = idx.size(1);
  const int32_t* ix = idx.data<int32_t>();
  const int32_t* ps = pos.data<int32_t>();
  dispatch_float(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const T* y = ys.data<T>();
    T* o = out.data<T>();
    dispatch_float(w.dtype(), [&](auto wtag) {
      using W = decltype(wtag);
      const W* wp = w.data<W>();
      for (int64_t t = 0; t < n; ++t) {
        const std::vector<int64_t> order = expert_order(ix + t * k, k);
        for (int64_t col = 0; col < c; ++col) {
          T acc = rounded_to<T>(A(0));
          for (int64_t j : order) {
            const T term = rounded_to<T>(A(ld(wp, t * k + j)) * ld(y, int64_t(ps[t * k + j]) * c + col));
            acc = rounded_to<T>(ld(&acc, 0) + ld(&term, 0));
          }
          o[t * c + col] = acc;
        }
      }
    });
  });
}

void CpuMoeKernels::moe_combine_bwd(const Tensor& dys, const Tensor& dw, const Tensor& dout, const Tensor& ys,
                                 const Tensor& w, const Tensor& pos) {
  const int64_t n = dout.size(0), c = dout.size(1), k = w.size(1);
  const int32_t* ps = pos.data<int32_t>();
  dispatch_float(dout.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const T* g = dout.data<T>();
    const T* y = ys.data<T>();
    T* dy = dys.data<T>();
    dispatch_float(w.dtype(), [&](auto wtag) {
      using W = decltype(wtag);
      const W* wp = w.data<W>();
      W* dwp = dw.data<W>();
      for (int64_t t = 0; t < n; ++t)
        for (int64_t j = 0; j < k; ++j) {
          const int64_t row = ps[t * k + j];
          const A wv = A(ld(wp, t * k + j));
          A s = 0;
          for (int64_t col = 0; col < c; ++col) {
            const A gv = ld(g, t * c + col);
            st(dy, row * c + col, gv * wv);
            s += gv * ld(y, row * c + col);
          }
          st(dwp, t * k + j, acc_t<W>(s));
        }
    });
  });
}

// Each piece through the backend's own nf4_dequantize_nested: the same bits by construction.
void CpuMoeKernels::nf4_dequantize_pieces(const Tensor& out, const Tensor& codes, const Tensor& absmax_codes,
                                          const Tensor& nested_absmax, std::span<const float> offsets,
                                          std::span<const float> map) {
  const int64_t p = out.size(0);
  LT_CHECK(out.dim() == 2 && out.is_contiguous() && codes.size(0) == p && absmax_codes.size(0) == p &&
               nested_absmax.size(0) == p && int64_t(offsets.size()) == p,
           "nf4_dequantize_pieces: out " + shape_str(out.shape()) + ", codes " + shape_str(codes.shape()) + ", " +
               std::to_string(offsets.size()) + " offsets",
           "one row of codes, absmax codes, nested absmax and one offset per piece", "pass an Nf4Stack's rows");
  auto row = [](const Tensor& t, int64_t i) {  // row i of a [P, m] tensor with contiguous rows
    return make_view(t, {t.size(1)}, {1}, t.offset() + i * t.strides()[0]);
  };
  Backend& be = backend_for(Device::cpu());
  for (int64_t i = 0; i < p; ++i)
    be.nf4_dequantize_nested(row(out, i), row(codes, i), row(absmax_codes, i), row(nested_absmax, i),
                             offsets[size_t(i)], map);
}

}  // namespace lt
