// Gated DeltaNet on the CPU: the reference of the chunked gated delta rule's pieces (the GEMMs
// between them are the gemm op's, called by ops/gated_delta.cpp), the decay and the causal
// depthwise convolution. Plain loops in the accumulation type A (f32; f64 for f64), each sum in
// index order; backend_ops.def ("delta") states what each op computes.
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_common.h"
#include "backend/delta_docs.h"

namespace lt {
using namespace cpu;

namespace {

// Element (b, t, h, i) of a [B, T, H, D] view with unit stride on D.
inline int64_t at4(const Tensor& x, int64_t b, int64_t t, int64_t h) {
  return b * x.strides()[0] + t * x.strides()[1] + h * x.strides()[2];
}

// The document starts (GdnDocs::start) of chunk n's rows.
void chunk_starts(std::vector<int>& st, const GdnDocs& docs, int64_t n) {
  st.resize(size_t(docs.C));
  for (int64_t i = 0; i < docs.C; ++i) st[size_t(i)] = docs.start(n, i);
}

// M (strictly lower: M_ts = bf_t exp(gam_t - gam_s) kk_ts for s in t's document, else 0) and
// T = (I + M)^-1 of one chunk, row by row: T_ts = -sum_{j = s}^{t - 1} M_tj T_js (s < t), T_tt = 1.
// kk, bf, gam, st point at the chunk.
template <class A>
void chunk_m_and_t(std::vector<A>& m, std::vector<A>& t, const A* kk, const A* bf, const A* gam, const int* st,
                   int64_t c) {
  m.assign(size_t(c * c), A(0));
  t.assign(size_t(c * c), A(0));
  for (int64_t i = 0; i < c; ++i)
    for (int64_t s = std::max<int64_t>(0, st[i]); s < i; ++s)
      m[size_t(i * c + s)] = bf[i] * std::exp(gam[i] - gam[s]) * kk[i * c + s];
  for (int64_t i = 0; i < c; ++i) {
    t[size_t(i * c + i)] = A(1);
    for (int64_t s = 0; s < i; ++s) {
      A acc = 0;
      for (int64_t j = s; j < i; ++j) acc += m[size_t(i * c + j)] * t[size_t(j * c + s)];
      t[size_t(i * c + s)] = -acc;
    }
  }
}

template <class F> void dispatch_acc(DType t, F&& f) {
  if (t == DType::F64) f(double{});
  else f(float{});
}

}  // namespace

void CpuBackend::gdn_prepare(const Tensor& qn, const Tensor& kn, const Tensor& vf, const Tensor& bf, const Tensor& gam,
                             const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta, const Tensor& g,
                             const Tensor& doc_pos, int64_t chunk, float scale) {
  const int64_t B = q.size(0), T = q.size(1), Hk = q.size(2), Dk = q.size(3), Hv = v.size(2), Dv = v.size(3);
  const int64_t G = Hv / Hk, Tp = qn.size(1);
  const GdnDocs docs = gdn_docs(doc_pos, B * Hv, Tp, chunk);
  dispatch_float(q.dtype(), [&](auto tag) {
    using S = decltype(tag);
    using A = acc_t<S>;
    const S *pq = q.data<S>(), *pk = k.data<S>(), *pv = v.data<S>(), *pb = beta.data<S>();
    const A* pg = g.data<A>();
    A *oq = qn.data<A>(), *ok = kn.data<A>(), *ov = vf.data<A>(), *ob = bf.data<A>(), *og = gam.data<A>();
    auto l2 = [&](const S* x, int64_t off, A* out, A mul) {
      A ss = 0;
      for (int64_t i = 0; i < Dk; ++i) {
        const A e = ld(x, off + i);
        ss += e * e;
      }
      const A r = A(1) / std::sqrt(ss + A(1e-6));
      for (int64_t i = 0; i < Dk; ++i) out[i] = ld(x, off + i) * r * mul;
    };
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < Hv; ++h) {
        const int64_t bh = b * Hv + h;
        A cum = 0;
        for (int64_t t = 0; t < Tp; ++t) {
          const int64_t row = bh * Tp + t;
          if (t % chunk == 0 || docs.start_of_row(bh, t) == t % chunk) cum = 0;  // a chunk's or document's start
          if (t < T) {
            l2(pq, at4(q, b, t, h / G), oq + row * Dk, A(scale));
            l2(pk, at4(k, b, t, h / G), ok + row * Dk, A(1));
            for (int64_t j = 0; j < Dv; ++j) ov[row * Dv + j] = ld(pv, at4(v, b, t, h) + j);
            ob[row] = ld(pb, (b * T + t) * Hv + h);
            cum += pg[(b * T + t) * Hv + h];
          } else {
            for (int64_t i = 0; i < Dk; ++i) oq[row * Dk + i] = ok[row * Dk + i] = A(0);
            for (int64_t j = 0; j < Dv; ++j) ov[row * Dv + j] = A(0);
            ob[row] = A(0);
          }
          og[row] = cum;
        }
      }
  });
}

void CpuBackend::gdn_tri_fwd(const Tensor& t, const Tensor& tb, const Tensor& tk, const Tensor& kk, const Tensor& bf,
                             const Tensor& gam, const Tensor& doc_pos) {
  const int64_t C = kk.size(1), N = kk.size(0);
  const GdnDocs docs = gdn_docs(doc_pos, bf.size(0), bf.size(1), C);
  dispatch_acc(kk.dtype(), [&](auto tag) {
    using A = decltype(tag);
    std::vector<A> m, tm;
    std::vector<int> st;
    for (int64_t n = 0; n < N; ++n) {
      const A* b = bf.data<A>() + n * C;
      const A* gm = gam.data<A>() + n * C;
      chunk_starts(st, docs, n);
      chunk_m_and_t(m, tm, kk.data<A>() + n * C * C, b, gm, st.data(), C);
      A* ob = tb.data<A>() + n * C * C;
      A* ok = tk.data<A>() + n * C * C;
      for (int64_t i = 0; i < C; ++i)
        for (int64_t s = 0; s < C; ++s) {
          const A x = tm[size_t(i * C + s)];
          ob[i * C + s] = x * b[s];
          ok[i * C + s] = st[size_t(s)] < 0 ? x * b[s] * std::exp(gm[s]) : A(0);  // the carried state reaches s
          if (t.defined()) t.data<A>()[n * C * C + i * C + s] = x;
        }
    }
  });
}

void CpuBackend::gdn_state_fwd(const Tensor& states, const Tensor& delta, const Tensor& u, const Tensor& w,
                               const Tensor& kn, const Tensor& gam, const Tensor& doc_pos) {
  const int64_t BH = states.size(0), NC = states.size(1), Dk = states.size(2), Dv = states.size(3);
  const int64_t Tp = gam.size(1), C = Tp / NC;
  const GdnDocs docs = gdn_docs(doc_pos, BH, Tp, C);
  dispatch_acc(states.dtype(), [&](auto tag) {
    using A = decltype(tag);
    std::vector<A> S(size_t(Dk * Dv));
    for (int64_t bh = 0; bh < BH; ++bh) {
      std::fill(S.begin(), S.end(), A(0));
      for (int64_t c = 0; c < NC; ++c) {
        A* out = states.data<A>() + (bh * NC + c) * Dk * Dv;
        std::copy(S.begin(), S.end(), out);
        const int64_t r0 = bh * Tp + c * C;
        const A* pu = u.data<A>() + r0 * Dv;
        const A* pw = w.data<A>() + r0 * Dk;
        const A* pk = kn.data<A>() + r0 * Dk;
        const A* pg = gam.data<A>() + r0;
        A* pd = delta.data<A>() + r0 * Dv;
        for (int64_t t = 0; t < C; ++t)
          for (int64_t j = 0; j < Dv; ++j) {
            A acc = 0;
            for (int64_t i = 0; i < Dk; ++i) acc += pw[t * Dk + i] * S[size_t(i * Dv + j)];
            pd[t * Dv + j] = pu[t * Dv + j] - acc;
          }
        // The next state is the last row's document's: its rows only, the carried state only when
        // that document began before the chunk.
        const int sl = docs.start(bh * NC + c, C - 1);
        const A gl = pg[C - 1], el = sl < 0 ? std::exp(gl) : A(0);
        for (int64_t i = 0; i < Dk; ++i)
          for (int64_t j = 0; j < Dv; ++j) {
            A acc = 0;
            for (int64_t t = std::max(0, sl); t < C; ++t) acc += std::exp(gl - pg[t]) * pk[t * Dk + i] * pd[t * Dv + j];
            S[size_t(i * Dv + j)] = el * S[size_t(i * Dv + j)] + acc;
          }
      }
    }
  });
}

void CpuBackend::gdn_decay_mask(const Tensor& p, const Tensor& gam, const Tensor& doc_pos) {
  const int64_t N = p.size(0), C = p.size(1);
  const GdnDocs docs = gdn_docs(doc_pos, gam.size(0), gam.size(1), C);
  dispatch_acc(p.dtype(), [&](auto tag) {
    using A = decltype(tag);
    for (int64_t n = 0; n < N; ++n) {
      A* pp = p.data<A>() + n * C * C;
      const A* pg = gam.data<A>() + n * C;
      for (int64_t t = 0; t < C; ++t) {
        const int st = docs.start(n, t);
        for (int64_t s = 0; s < C; ++s)
          pp[t * C + s] = s <= t && s >= st ? pp[t * C + s] * std::exp(pg[t] - pg[s]) : A(0);
      }
    }
  });
}

void CpuBackend::gdn_output(const Tensor& out, const Tensor& o, const Tensor& y, const Tensor& gam, const Tensor& doc_pos,
                            int64_t chunk) {
  const int64_t B = out.size(0), T = out.size(1), Hv = out.size(2), Dv = out.size(3), Tp = gam.size(1);
  const GdnDocs docs = gdn_docs(doc_pos, B * Hv, Tp, chunk);
  dispatch_float(out.dtype(), [&](auto tag) {
    using S = decltype(tag);
    dispatch_acc(o.dtype(), [&](auto atag) {
      using A = decltype(atag);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t)
          for (int64_t h = 0; h < Hv; ++h) {
            const int64_t row = (b * Hv + h) * Tp + t;
            const A e = docs.start_of_row(b * Hv + h, t) < 0 ? std::exp(gam.data<A>()[row]) : A(0);
            for (int64_t j = 0; j < Dv; ++j)
              st(out.data<S>(), ((b * T + t) * Hv + h) * Dv + j,
                 acc_t<S>(o.data<A>()[row * Dv + j] + e * y.data<A>()[row * Dv + j]));
          }
    });
  });
}

void CpuBackend::gdn_pack(const Tensor& dst, const Tensor& src) {
  const int64_t B = src.size(0), T = src.size(1), H = src.size(2), D = src.size(3), Tp = dst.size(1);
  dispatch_float(src.dtype(), [&](auto tag) {
    using S = decltype(tag);
    dispatch_acc(dst.dtype(), [&](auto atag) {
      using A = decltype(atag);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t t = 0; t < Tp; ++t)
            for (int64_t j = 0; j < D; ++j)
              dst.data<A>()[((b * H + h) * Tp + t) * D + j] =
                  t < T ? A(ld(src.data<S>(), ((b * T + t) * H + h) * D + j)) : A(0);
    });
  });
}

void CpuBackend::gdn_state_bwd(const Tensor& dsend, const Tensor& ddelta, const Tensor& dout, const Tensor& p,
                               const Tensor& w, const Tensor& qn, const Tensor& kn, const Tensor& gam,
                               const Tensor& doc_pos) {
  const int64_t BH = dsend.size(0), NC = dsend.size(1), Dk = dsend.size(2), Dv = dsend.size(3);
  const int64_t Tp = gam.size(1), C = Tp / NC;
  const GdnDocs docs = gdn_docs(doc_pos, BH, Tp, C);
  dispatch_acc(dsend.dtype(), [&](auto tag) {
    using A = decltype(tag);
    std::vector<A> dS(size_t(Dk * Dv));
    std::vector<int> st;
    for (int64_t bh = 0; bh < BH; ++bh) {
      std::fill(dS.begin(), dS.end(), A(0));
      for (int64_t c = NC - 1; c >= 0; --c) {
        std::copy(dS.begin(), dS.end(), dsend.data<A>() + (bh * NC + c) * Dk * Dv);
        const int64_t r0 = bh * Tp + c * C;
        const A* pp = p.data<A>() + (bh * NC + c) * C * C;
        const A* pdo = dout.data<A>() + r0 * Dv;
        const A* pw = w.data<A>() + r0 * Dk;
        const A* pq = qn.data<A>() + r0 * Dk;
        const A* pk = kn.data<A>() + r0 * Dk;
        const A* pg = gam.data<A>() + r0;
        A* pdd = ddelta.data<A>() + r0 * Dv;
        chunk_starts(st, docs, bh * NC + c);
        const int sl = st[size_t(C - 1)];
        const A gl = pg[C - 1], el = sl < 0 ? std::exp(gl) : A(0);
        for (int64_t t = 0; t < C; ++t) {
          const A ek = t >= sl ? std::exp(gl - pg[t]) : A(0);
          for (int64_t j = 0; j < Dv; ++j) {
            A a1 = 0, a2 = 0;
            for (int64_t s = 0; s < C; ++s) a1 += pp[s * C + t] * pdo[s * Dv + j];
            for (int64_t i = 0; i < Dk; ++i) a2 += pk[t * Dk + i] * dS[size_t(i * Dv + j)];
            pdd[t * Dv + j] = a1 + ek * a2;
          }
        }
        for (int64_t i = 0; i < Dk; ++i)
          for (int64_t j = 0; j < Dv; ++j) {
            A a1 = 0, a2 = 0;
            for (int64_t t = 0; t < C; ++t) {
              a1 += (st[size_t(t)] < 0 ? std::exp(pg[t]) : A(0)) * pq[t * Dk + i] * pdo[t * Dv + j];
              a2 += pw[t * Dk + i] * pdd[t * Dv + j];
            }
            dS[size_t(i * Dv + j)] = el * dS[size_t(i * Dv + j)] + a1 - a2;
          }
      }
    }
  });
}

void CpuBackend::gdn_tri_bwd(const Tensor& dkk, const Tensor& dbf, const Tensor& dgam, const Tensor& dtb,
                             const Tensor& dtk, const Tensor& kk, const Tensor& bf, const Tensor& gam,
                             const Tensor& doc_pos) {
  const int64_t C = kk.size(1), N = kk.size(0);
  const GdnDocs docs = gdn_docs(doc_pos, bf.size(0), bf.size(1), C);
  dispatch_acc(kk.dtype(), [&](auto tag) {
    using A = decltype(tag);
    std::vector<A> m, tm, gm(size_t(C * C)), z(size_t(C * C)), dm(size_t(C * C));
    std::vector<int> st;
    for (int64_t n = 0; n < N; ++n) {
      const A* k2 = kk.data<A>() + n * C * C;
      const A* b = bf.data<A>() + n * C;
      const A* g = gam.data<A>() + n * C;
      const A* db = dtb.data<A>() + n * C * C;
      const A* dk = dtk.data<A>() + n * C * C;
      A* obf = dbf.data<A>() + n * C;
      A* ogm = dgam.data<A>() + n * C;
      A* okk = dkk.data<A>() + n * C * C;
      chunk_starts(st, docs, n);
      chunk_m_and_t(m, tm, k2, b, g, st.data(), C);
      // exp(gam_s) where the carried state reaches row s (tk's factor), else 0.
      auto reach = [&](int64_t s) { return st[size_t(s)] < 0 ? std::exp(g[s]) : A(0); };
      // exp(gam_t - gam_s) for s < t in t's document, else 0 (M's factor).
      auto decay = [&](int64_t t, int64_t s) { return s < t && s >= st[size_t(t)] ? std::exp(g[t] - g[s]) : A(0); };
      // Through tb = T diag(bf) and tk = T diag(bf exp(gam)): G (T's gradient below the diagonal),
      // and the columns' bf and gam terms (the diagonal T_ss = 1 included).
      for (int64_t s = 0; s < C; ++s) {
        const A es = reach(s);
        A sb = 0, sg = 0;
        for (int64_t i = s; i < C; ++i) {
          const A x = tm[size_t(i * C + s)];
          sb += (db[i * C + s] + dk[i * C + s] * es) * x;
          sg += dk[i * C + s] * x * b[s] * es;
        }
        obf[s] = sb;
        ogm[s] = sg;
      }
      for (int64_t i = 0; i < C; ++i)
        for (int64_t s = 0; s < C; ++s)
          gm[size_t(i * C + s)] = s < i ? db[i * C + s] * b[s] + dk[i * C + s] * b[s] * reach(s) : A(0);
      // dM = -(T^T G T^T) below the diagonal: Z = T^T G, dM = -Z T^T.
      for (int64_t i = 0; i < C; ++i)
        for (int64_t j = 0; j < C; ++j) {
          A acc = 0;
          for (int64_t a = 0; a < C; ++a) acc += tm[size_t(a * C + i)] * gm[size_t(a * C + j)];
          z[size_t(i * C + j)] = acc;
        }
      for (int64_t i = 0; i < C; ++i)
        for (int64_t j = 0; j < C; ++j) {
          A acc = 0;
          if (j < i)
            for (int64_t a = 0; a < C; ++a) acc += z[size_t(i * C + a)] * tm[size_t(j * C + a)];
          dm[size_t(i * C + j)] = -acc;
        }
      // Through M_ts = bf_t exp(gam_t - gam_s) kk_ts: kk's gradient (symmetric: kk = kn kn^T gives
      // kn the sum of both), bf_t's and gam's (R = dM M: + its row sums, - its column sums).
      for (int64_t i = 0; i < C; ++i) {
        A sb = 0, sr = 0;
        for (int64_t s = 0; s < i; ++s) {
          const A e = decay(i, s);
          sb += dm[size_t(i * C + s)] * e * k2[i * C + s];
          sr += dm[size_t(i * C + s)] * m[size_t(i * C + s)];
        }
        obf[i] += sb;
        ogm[i] += sr;
      }
      for (int64_t s = 0; s < C; ++s) {
        A sr = 0;
        for (int64_t i = s + 1; i < C; ++i) sr += dm[size_t(i * C + s)] * m[size_t(i * C + s)];
        ogm[s] -= sr;
      }
      auto half = [&](int64_t i, int64_t s) { return s < i ? dm[size_t(i * C + s)] * b[i] * decay(i, s) : A(0); };
      for (int64_t i = 0; i < C; ++i)
        for (int64_t s = 0; s < C; ++s) okk[i * C + s] = half(i, s) + half(s, i);
    }
  });
}

void CpuBackend::gdn_decay_mask_bwd(const Tensor& dp, const Tensor& dgam, const Tensor& p, const Tensor& gam,
                                    const Tensor& doc_pos) {
  const int64_t N = p.size(0), C = p.size(1);
  const GdnDocs docs = gdn_docs(doc_pos, gam.size(0), gam.size(1), C);
  dispatch_acc(p.dtype(), [&](auto tag) {
    using A = decltype(tag);
    std::vector<A> r(size_t(C * C));
    for (int64_t n = 0; n < N; ++n) {
      A* d = dp.data<A>() + n * C * C;
      const A* pp = p.data<A>() + n * C * C;
      const A* g = gam.data<A>() + n * C;
      A* og = dgam.data<A>() + n * C;
      for (int64_t t = 0; t < C; ++t) {
        const int st = docs.start(n, t);
        for (int64_t s = 0; s < C; ++s) {
          const bool seen = s <= t && s >= st;
          r[size_t(t * C + s)] = seen ? d[t * C + s] * pp[t * C + s] : A(0);
          d[t * C + s] = seen ? d[t * C + s] * std::exp(g[t] - g[s]) : A(0);
        }
      }
      for (int64_t t = 0; t < C; ++t) {
        A rows = 0, cols = 0;
        for (int64_t s = 0; s < C; ++s) rows += r[size_t(t * C + s)];
        for (int64_t i = 0; i < C; ++i) cols += r[size_t(i * C + t)];
        og[t] += rows - cols;
      }
    }
  });
}

void CpuBackend::gdn_rows_bwd(const Tensor& dq, const Tensor& dk, const Tensor& dgam, const Tensor& dqg,
                              const Tensor& dkt, const Tensor& qn, const Tensor& kn, const Tensor& gam,
                              const Tensor& states, const Tensor& dsend, const Tensor& doc_pos) {
  const int64_t BH = states.size(0), NC = states.size(1), Dk = states.size(2), Dv = states.size(3);
  const int64_t Tp = gam.size(1), C = Tp / NC;
  const GdnDocs docs = gdn_docs(doc_pos, BH, Tp, C);
  dispatch_acc(dq.dtype(), [&](auto tag) {
    using A = decltype(tag);
    std::vector<int> st;
    for (int64_t n = 0; n < BH * NC; ++n) {
      const int64_t r0 = n * C;  // chunk n's first row: (bh * NC + c) * C = bh * Tp + c * C
      const A* g = gam.data<A>() + r0;
      A* og = dgam.data<A>() + r0;
      const A gl = g[C - 1];
      chunk_starts(st, docs, n);
      const int sl = st[size_t(C - 1)];
      A rsum = 0;
      for (int64_t t = 0; t < C; ++t) {
        const A eq = st[size_t(t)] < 0 ? std::exp(g[t]) : A(0), ek = t >= sl ? std::exp(gl - g[t]) : A(0);
        A* pdq = dq.data<A>() + (r0 + t) * Dk;
        A* pdk = dk.data<A>() + (r0 + t) * Dk;
        const A* pqg = dqg.data<A>() + (r0 + t) * Dk;
        const A* pkt = dkt.data<A>() + (r0 + t) * Dk;
        const A* pq = qn.data<A>() + (r0 + t) * Dk;
        const A* pk = kn.data<A>() + (r0 + t) * Dk;
        A dotq = 0, dotk = 0;
        for (int64_t i = 0; i < Dk; ++i) {
          dotq += pqg[i] * pq[i];
          dotk += pkt[i] * pk[i];
          pdq[i] += eq * pqg[i];
          pdk[i] += ek * pkt[i];
        }
        og[t] += eq * dotq - ek * dotk;
        rsum += ek * dotk;
      }
      const A* s = states.data<A>() + n * Dk * Dv;
      const A* ds = dsend.data<A>() + n * Dk * Dv;
      A frob = 0;
      for (int64_t e = 0; e < Dk * Dv; ++e) frob += ds[e] * s[e];
      og[C - 1] += rsum + (sl < 0 ? std::exp(gl) : A(0)) * frob;
    }
  });
}

void CpuBackend::gdn_finish(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dbeta, const Tensor& dg,
                            const Tensor& dqn, const Tensor& dkn, const Tensor& dvf, const Tensor& dbf,
                            const Tensor& dgam, const Tensor& q, const Tensor& k, const Tensor& doc_pos, int64_t chunk,
                            float scale) {
  const int64_t B = q.size(0), T = q.size(1), Hk = q.size(2), Dk = q.size(3), Hv = dv.size(2), Dv = dv.size(3);
  const int64_t G = Hv / Hk, Tp = dgam.size(1);
  const GdnDocs docs = gdn_docs(doc_pos, B * Hv, Tp, chunk);
  dispatch_float(q.dtype(), [&](auto tag) {
    using S = decltype(tag);
    using A = acc_t<S>;
    // The l2norm's backward: x^ = x r, r = 1 / sqrt(|x|^2 + eps): dx = r (dx^ - x^ (x^ . dx^)), with
    // dx^ = mul * (the sum over the key head's value heads, in order).
    std::vector<A> dn(static_cast<size_t>(Dk));
    auto l2_bwd = [&](const Tensor& x, const Tensor& dx, const Tensor& dsum, int64_t b, int64_t t, int64_t hk, A mul) {
      const S* px = x.data<S>();
      const int64_t off = at4(x, b, t, hk);
      std::fill(dn.begin(), dn.end(), A(0));
      for (int64_t h = hk * G; h < (hk + 1) * G; ++h) {
        const A* src = dsum.data<A>() + ((b * Hv + h) * Tp + t) * Dk;
        for (int64_t i = 0; i < Dk; ++i) dn[size_t(i)] += src[i];
      }
      A ss = 0;
      for (int64_t i = 0; i < Dk; ++i) ss += ld(px, off + i) * ld(px, off + i);
      const A r = A(1) / std::sqrt(ss + A(1e-6));
      A dot = 0;
      for (int64_t i = 0; i < Dk; ++i) dot += ld(px, off + i) * r * dn[size_t(i)] * mul;
      for (int64_t i = 0; i < Dk; ++i)
        st(dx.data<S>(), at4(dx, b, t, hk) + i, r * (dn[size_t(i)] * mul - ld(px, off + i) * r * dot));
    };
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t hk = 0; hk < Hk; ++hk) {
          l2_bwd(q, dq, dqn, b, t, hk, A(scale));
          l2_bwd(k, dk, dkn, b, t, hk, A(1));
        }
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < Hv; ++h) {
        const int64_t bh = b * Hv + h;
        for (int64_t t = 0; t < T; ++t) {
          const int64_t row = bh * Tp + t;
          for (int64_t j = 0; j < Dv; ++j) st(dv.data<S>(), at4(dv, b, t, h) + j, dvf.data<A>()[row * Dv + j]);
          st(dbeta.data<S>(), (b * T + t) * Hv + h, dbf.data<A>()[row]);
        }
        // dg_t = sum of dgam over t' >= t in t's chunk and document (the padding rows included: gam
        // runs through them), as gam sums g from the later of the two starts.
        for (int64_t c0 = 0; c0 < Tp; c0 += chunk) {
          A acc = 0;
          for (int64_t t = c0 + chunk - 1; t >= c0; --t) {
            acc += dgam.data<A>()[bh * Tp + t];
            if (t < T) dg.data<A>()[(b * T + t) * Hv + h] = acc;
            if (docs.start_of_row(bh, t) == t - c0) acc = 0;
          }
        }
      }
  });
}

// softplus as torch computes it (beta 1, threshold 20: x itself above it) and its derivative.
template <class A> A softplus_of(A x) { return x > A(20) ? x : std::log1p(std::exp(x)); }
template <class A> A softplus_grad(A x) { return x > A(20) ? A(1) : A(1) / (A(1) + std::exp(-x)); }

void CpuBackend::gdn_decay_fwd(const Tensor& g, const Tensor& a, const Tensor& a_log, const Tensor& dt_bias) {
  const int64_t N = a.size(0), H = a.size(1), as = a.strides()[0];
  dispatch_float(a.dtype(), [&](auto tag) {
    using S = decltype(tag);
    dispatch_acc(g.dtype(), [&](auto atag) {
      using A = decltype(atag);
      std::vector<A> al(static_cast<size_t>(H)), dt(static_cast<size_t>(H));
      dispatch_float(a_log.dtype(), [&](auto p) {
        for (int64_t h = 0; h < H; ++h) al[size_t(h)] = A(ld(a_log.data<decltype(p)>(), h));
      });
      dispatch_float(dt_bias.dtype(), [&](auto p) {
        for (int64_t h = 0; h < H; ++h) dt[size_t(h)] = A(ld(dt_bias.data<decltype(p)>(), h));
      });
      for (int64_t r = 0; r < N; ++r)
        for (int64_t h = 0; h < H; ++h) {
          const A x = A(ld(a.data<S>(), r * as + h)) + dt[size_t(h)];
          g.data<A>()[r * H + h] = -std::exp(al[size_t(h)]) * softplus_of(x);
        }
    });
  });
}

void CpuBackend::gdn_decay_bwd(const Tensor& da, const Tensor& dalog, const Tensor& dg, const Tensor& a,
                               const Tensor& a_log, const Tensor& dt_bias) {
  const int64_t N = a.size(0), H = a.size(1), as = a.strides()[0];
  dispatch_float(a.dtype(), [&](auto tag) {
    using S = decltype(tag);
    dispatch_acc(da.dtype(), [&](auto atag) {
      using A = decltype(atag);
      std::vector<A> al(static_cast<size_t>(H)), dt(static_cast<size_t>(H));
      dispatch_float(a_log.dtype(), [&](auto p) {
        for (int64_t h = 0; h < H; ++h) al[size_t(h)] = A(ld(a_log.data<decltype(p)>(), h));
      });
      dispatch_float(dt_bias.dtype(), [&](auto p) {
        for (int64_t h = 0; h < H; ++h) dt[size_t(h)] = A(ld(dt_bias.data<decltype(p)>(), h));
      });
      for (int64_t r = 0; r < N; ++r)
        for (int64_t h = 0; h < H; ++h) {
          const A x = A(ld(a.data<S>(), r * as + h)) + dt[size_t(h)];
          const A e = std::exp(al[size_t(h)]), d = dg.data<A>()[r * H + h];
          da.data<A>()[r * H + h] = -d * e * softplus_grad(x);
          dalog.data<A>()[r * H + h] = -d * e * softplus_of(x);
        }
    });
  });
}

}  // namespace lt
