// Reference attention: for each (batch, head) the Tq x Tk scores live in host scratch and
// every product goes through BLAS (S = Q K^T, O = P V, and the four backward GEMMs), so the
// cost is the GEMMs plus O(Tq*Tk) elementwise work. 16-bit operands are widened to f32 once.
// A query that sees no key (all masked, or causal with Tq > Tk) outputs zeros and gets
// lse = +inf, so exp(s - lse) = 0 in the backward and its gradients vanish too.
// Operands may be strided [B, H, T, D] views (unit stride on D), e.g. the heads of a packed qkv:
// rows are gathered into (and results scattered from) per-(b, h) scratch.
// Grouped-query attention: k, v (and dk, dv) may have Hkv heads, Hkv dividing H; query head h
// reads kv head h / G (G = H / Hkv). The backward walks the G query heads of a kv head in order
// and accumulates their dK, dV contributions (GEMMs with beta = 1), so the sum is the same every run.
// A sliding window or packed documents (doc_pos) split the queries into blocks of 64 rows, each
// multiplied with only the keys it may see: O(T * (window + 64) * D), not O(T^2 * D).
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string>
#include <limits>
#include <type_traits>
#include <vector>

#include "backend/cpu/blas_call.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_common.h"

namespace lt {
using namespace cpu;

namespace {

// Row-major C = alpha op(A) op(B) + beta C, in f32 or f64 (beta 0: C is overwritten).
void blas(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, const float* b, float* c,
          float beta = 0.0f) {
  const BlasCall blas_call;
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m), int(n), int(k),
              alpha, a, int(ta ? m : k), b, int(tb ? k : n), beta, c, int(n));
}
void blas(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a, const double* b,
          double* c, double beta = 0.0) {
  const BlasCall blas_call;
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m), int(n), int(k),
              alpha, a, int(ta ? m : k), b, int(tb ? k : n), beta, c, int(n));
}

// Where row t of (b, h) starts in a [B, H, T, D] view with unit stride on D (any batch, head
// and time strides: the heads of a packed qkv are such views).
struct Rows {
  int64_t h, sb, sh, st;
  explicit Rows(const Tensor& t)
      : h(t.defined() ? t.size(1) : 1), sb(t.defined() ? t.strides()[0] : 0), sh(t.defined() ? t.strides()[1] : 0),
        st(t.defined() ? t.strides()[2] : 0) {}
  int64_t base(int64_t bh) const { return (bh / h) * sb + (bh % h) * sh; }
};

// One [T, D] slice of a [B, H, T, D] tensor, in the accumulation type: a pointer into the
// tensor when it already has that type and its rows are packed, else a gathered (widened) copy.
template <class T> class Slice {
 public:
  using A = acc_t<T>;
  Slice(const Tensor& t, int64_t rows, int64_t d) : t_(t), rows_(rows), d_(d), r_(t) {
    if (!t.defined()) return;
    direct_ = std::is_same_v<T, A> && (r_.st == d || rows == 1);
    if (!direct_) buf_.resize(size_t(rows * d));
  }
  const A* load(int64_t bh) {
    const T* p = t_.data<T>() + r_.base(bh);
    if constexpr (std::is_same_v<T, A>) {
      if (direct_) return p;
    }
    if (bh == loaded_) return buf_.data();  // the kv head of the previous query head of its group
    loaded_ = bh;
    for (int64_t t = 0; t < rows_; ++t)
      for (int64_t i = 0; i < d_; ++i) buf_[size_t(t * d_ + i)] = ld(p + t * r_.st, i);
    return buf_.data();
  }

 private:
  const Tensor& t_;
  int64_t rows_, d_;
  Rows r_;
  bool direct_ = false;
  int64_t loaded_ = -1;
  std::vector<A> buf_;
};

// v holds [T, D] rows for (b, h) of t.
template <class T, class A> void store_slice(const Tensor& t, int64_t bh, int64_t d, const std::vector<A>& v) {
  const Rows r(t);
  T* p = t.data<T>() + r.base(bh);
  const int64_t rows = int64_t(v.size()) / d;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < d; ++j) st(p + i * r.st, j, v[size_t(i * d + j)]);
}

// The keys query i may see: first(i) <= j <= last(i) and mask[j] != 0. first(i) comes from the
// sliding window (last(i) - window < j) and the packed documents (j >= i - doc[i]).
struct Visibility {
  const uint8_t* mask;  // [Tk] for this batch, or nullptr
  const int32_t* doc;   // [T] for this batch, or nullptr (Tq == Tk)
  int64_t tq, tk, window;
  bool causal;
  int64_t last(int64_t i) const { return causal ? i + tk - tq : tk - 1; }
  int64_t first(int64_t i) const {
    int64_t lo = 0;
    if (window > 0) lo = std::max(lo, last(i) - window + 1);
    if (doc) lo = std::max(lo, i - int64_t(doc[i]));
    return lo;
  }
  bool sees(int64_t i, int64_t j) const { return j >= first(i) && j <= last(i) && (!mask || mask[j]); }
};

// A block of query rows [i0, i1) and the keys [kb, ke) any of them may see (ke <= kb: none).
// Without a window or documents one block holds every query (one GEMM per head, as before);
// with them blocks of kRowBlock rows keep the work proportional to the visible keys.
constexpr int64_t kRowBlock = 64;
struct RowBlock {
  int64_t i0, i1, kb, ke;
};
std::vector<RowBlock> row_blocks(const Visibility& vis) {
  const int64_t step = (vis.window > 0 || vis.doc) ? kRowBlock : vis.tq;
  std::vector<RowBlock> out;
  for (int64_t i0 = 0; i0 < vis.tq; i0 += step) {
    RowBlock r{i0, std::min(vis.tq, i0 + step), vis.tk, 0};
    for (int64_t i = r.i0; i < r.i1; ++i) {  // exact bounds even for an unchecked doc
      r.kb = std::min(r.kb, vis.first(i));
      r.ke = std::max(r.ke, std::min(vis.tk, vis.last(i) + 1));
    }
    out.push_back(r);
  }
  return out;
}

// Scores s[0, n) of keys kb .. kb + n - 1 (scaled) -> probabilities in place; returns lse
// (+inf when nothing is visible).
template <class A> A softmax_row(A* s, int64_t i, int64_t kb, int64_t n, const Visibility& vis) {
  const A inf = std::numeric_limits<A>::infinity();
  A mx = -inf;
  for (int64_t j = 0; j < n; ++j)
    if (vis.sees(i, kb + j) && s[j] > mx) mx = s[j];
  if (mx == -inf) {
    for (int64_t j = 0; j < n; ++j) s[j] = 0;
    return inf;
  }
  A sum = 0;
  for (int64_t j = 0; j < n; ++j) sum += (s[j] = vis.sees(i, kb + j) ? std::exp(s[j] - mx) : A(0));
  for (int64_t j = 0; j < n; ++j) s[j] /= sum;
  return mx + std::log(sum);
}

// h query heads share hkv kv heads in groups of g = h / hkv: query (b, h) index bh reads kv
// (b, h / g) index bh / g, and kv index j serves query indices j * g .. j * g + g - 1.
struct AttnDims {
  int64_t b, h, hkv, g, tq, tk, d;
  explicit AttnDims(const Tensor& q, const Tensor& k)
      : b(q.size(0)), h(q.size(1)), hkv(k.size(1)), g(hkv > 0 ? h / hkv : 1), tq(q.size(2)), tk(k.size(2)),
        d(q.size(3)) {}
  Visibility vis(const Tensor& mask, const Tensor& doc, int64_t window, int64_t bh, bool causal) const {
    const uint8_t* m = mask.defined() ? mask.data<uint8_t>() + (bh / h) * tk : nullptr;
    const int32_t* dp = doc.defined() ? doc.data<int32_t>() + (bh / h) * tq : nullptr;
    return {m, dp, tq, tk, window, causal};
  }
};

// window and doc_pos as the backend op's contract has them (the front-end checks the details).
void check_mask_kinds(const char* op, const AttnDims& n, bool causal, int64_t window, const Tensor& doc) {
  LT_CHECK(window >= 0 && (window == 0 || causal), std::string(op) + ": window " + std::to_string(window),
           "a sliding window is >= 0 and causal only", "pass causal with window >= 0");
  LT_CHECK(!doc.defined() || (causal && n.tq == n.tk && doc.dtype() == DType::I32 && doc.is_contiguous() &&
                              doc.numel() == n.b * n.tq),
           std::string(op) + ": doc_pos " + (doc.defined() ? shape_str(doc.shape()) : std::string()),
           "doc_pos is a contiguous i32 [B, T] for causal self-attention", "pass it as the front-end does");
}

// Every [B, H, T, D] operand must have unit stride on D (rows are read as spans).
void check_rows(const char* op, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    LT_CHECK(!t->defined() || (t->dim() == 4 && (t->strides()[3] == 1 || t->size(3) == 1)),
             std::string(op) + ": an operand of shape " + shape_str(t->shape()) + " is not a [B, H, T, D] view with unit stride on D",
             "the kernel reads and writes each row of D values as one span", "make the head dim contiguous");
}

// k and v: [B, Hkv, Tk, D] with Hkv dividing q's H (grouped-query attention when Hkv < H).
void check_kv_heads(const char* op, const Tensor& q, const Tensor& k, const Tensor& v) {
  const int64_t h = q.size(1), hkv = k.size(1);
  LT_CHECK((hkv == h || (hkv > 0 && h % hkv == 0)) && v.size(1) == hkv,
           std::string(op) + ": q has " + std::to_string(h) + " heads, k " + std::to_string(hkv) + " and v " +
               std::to_string(v.size(1)),
           "each kv head serves H / Hkv query heads", "give k and v one head count that divides q's");
}

}  // namespace

void CpuBackend::attention_fwd(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                               const Tensor& v, const Tensor& mask, bool causal, int64_t window, const Tensor& doc_pos,
                               float scale) {
  check_rows("attention_fwd", {&out, &q, &k, &v});
  check_kv_heads("attention_fwd", q, k, v);
  const AttnDims n(q, k);
  check_mask_kinds("attention_fwd", n, causal, window, doc_pos);
  dispatch_float(q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    Slice<T> qs(q, n.tq, n.d), ks(k, n.tk, n.d), vs(v, n.tk, n.d);
    const int64_t rows = (window > 0 || doc_pos.defined()) ? std::min(n.tq, kRowBlock) : n.tq;
    std::vector<A> s(size_t(rows * n.tk)), o(size_t(n.tq * n.d));
    A* plse = aux_data<A>(lse);
    for (int64_t bh = 0; bh < n.b * n.h; ++bh) {
      const Visibility vis = n.vis(mask, doc_pos, window, bh, causal);
      const A* qp = qs.load(bh);
      const A* kp = ks.load(bh / n.g);
      const A* vp = vs.load(bh / n.g);
      for (const RowBlock& r : row_blocks(vis)) {
        const int64_t m = r.i1 - r.i0, span = r.ke - r.kb;
        if (span <= 0) {  // no query of the block sees a key
          std::fill(o.begin() + r.i0 * n.d, o.begin() + r.i1 * n.d, A(0));
          for (int64_t i = r.i0; i < r.i1; ++i) plse[bh * n.tq + i] = std::numeric_limits<A>::infinity();
          continue;
        }
        blas(false, true, m, span, n.d, A(scale), qp + r.i0 * n.d, kp + r.kb * n.d, s.data());
        for (int64_t i = r.i0; i < r.i1; ++i)
          plse[bh * n.tq + i] = softmax_row(s.data() + (i - r.i0) * span, i, r.kb, span, vis);
        blas(false, false, m, n.d, span, A(1), s.data(), vp + r.kb * n.d, o.data() + r.i0 * n.d);
      }
      store_slice<T>(out, bh, n.d, o);
    }
  });
}

// With P = exp(scale QK^T - lse): dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(P dP)),
// dQ = scale dS K, dK = scale dS^T Q. rowsum(P dP) equals rowsum(dO * O) but is computed from
// P here, so the reference does not depend on O's rounding.
void CpuBackend::attention_bwd(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                               const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                               const Tensor& lse, const Tensor& mask, bool causal, int64_t window,
                               const Tensor& doc_pos, float scale) {
  check_rows("attention_bwd", {&dq, &dk, &dv, &dout, &q, &k, &v, &out});
  check_kv_heads("attention_bwd", q, k, v);
  const AttnDims n(q, k);
  check_mask_kinds("attention_bwd", n, causal, window, doc_pos);
  dispatch_float(q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    Slice<T> qs(q, n.tq, n.d), ks(k, n.tk, n.d), vs(v, n.tk, n.d), dos(dout, n.tq, n.d);
    const int64_t rows = (window > 0 || doc_pos.defined()) ? std::min(n.tq, kRowBlock) : n.tq;
    std::vector<A> p(size_t(rows * n.tk)), dp(size_t(rows * n.tk));
    std::vector<A> gq(size_t(n.tq * n.d)), gk(size_t(n.tk * n.d)), gv(size_t(n.tk * n.d));
    const A* plse = aux_data<A>(lse);
    for (int64_t bkv = 0; bkv < n.b * n.hkv; ++bkv) {
      const A* kp = ks.load(bkv);
      const A* vp = vs.load(bkv);
      // The group's query heads in order, each over its row blocks in order, add into gk, gv.
      std::fill(gk.begin(), gk.end(), A(0));
      std::fill(gv.begin(), gv.end(), A(0));
      for (int64_t bh = bkv * n.g; bh < (bkv + 1) * n.g; ++bh) {
        const Visibility vis = n.vis(mask, doc_pos, window, bh, causal);
        const A* qp = qs.load(bh);
        const A* dop = dos.load(bh);
        for (const RowBlock& r : row_blocks(vis)) {
          const int64_t m = r.i1 - r.i0, span = r.ke - r.kb;
          if (span <= 0) {
            std::fill(gq.begin() + r.i0 * n.d, gq.begin() + r.i1 * n.d, A(0));
            continue;
          }
          const A* qb = qp + r.i0 * n.d;
          const A* dob = dop + r.i0 * n.d;
          blas(false, true, m, span, n.d, A(scale), qb, kp + r.kb * n.d, p.data());
          for (int64_t i = r.i0; i < r.i1; ++i) {
            const A l = plse[bh * n.tq + i];
            A* row = p.data() + (i - r.i0) * span;
            for (int64_t j = 0; j < span; ++j) row[j] = vis.sees(i, r.kb + j) ? std::exp(row[j] - l) : A(0);
          }
          blas(true, false, span, n.d, m, A(1), p.data(), dob, gv.data() + r.kb * n.d, A(1));
          blas(false, true, m, span, n.d, A(1), dob, vp + r.kb * n.d, dp.data());
          for (int64_t i = 0; i < m; ++i) {
            A* pr = p.data() + i * span;
            A* dr = dp.data() + i * span;
            A dot = 0;
            for (int64_t j = 0; j < span; ++j) dot += pr[j] * dr[j];
            for (int64_t j = 0; j < span; ++j) dr[j] = pr[j] * (dr[j] - dot);  // dS, in place
          }
          blas(false, false, m, n.d, span, A(scale), dp.data(), kp + r.kb * n.d, gq.data() + r.i0 * n.d);
          blas(true, false, span, n.d, m, A(scale), dp.data(), qb, gk.data() + r.kb * n.d, A(1));
        }
        store_slice<T>(dq, bh, n.d, gq);
      }
      store_slice<T>(dk, bkv, n.d, gk);
      store_slice<T>(dv, bkv, n.d, gv);
    }
  });
}

// The CPU has no cuDNN: the cuDNN-routed calls are the reference itself (the front-end routes
// there on CUDA only; these keep the op table whole and serve tests that call them directly).
void CpuBackend::attention_fwd_cudnn(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                                    const Tensor& v, bool causal, float scale, bool /*strict*/) {
  attention_fwd(out, lse, q, k, v, Tensor(), causal, 0, Tensor(), scale);
}

void CpuBackend::attention_bwd_cudnn(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                                    const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                    const Tensor& lse, const Tensor& /*workspace*/, bool causal, float scale,
                                    bool /*strict*/) {
  attention_bwd(dq, dk, dv, dout, q, k, v, out, lse, Tensor(), causal, 0, Tensor(), scale);
}

}  // namespace lt
