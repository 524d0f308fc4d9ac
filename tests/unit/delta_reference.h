// Naive references of Gated DeltaNet's pieces, written with plain ops (f64 in the tests): the
// token-by-token gated delta rule (transformers' torch_recurrent_gated_delta_rule with
// use_qk_l2norm_in_kernel), the decay, the causal depthwise convolution and the gated RMSNorm.
#pragma once
#include <cmath>

#include "leantrain/ops.h"

namespace lt::test::delta_ref {

// x / sqrt(|x|^2 + 1e-6) over the last dim.
inline Tensor naive_l2n(const Tensor& x) { return div(x, sqrt(add_scalar(sum(mul(x, x), {-1}, true), 1e-6))); }

// The recurrence step by step, per (b, h): S = exp(g) S; delta = beta (v - S^T k); S += k delta^T;
// o = S^T q (q, k l2-normalised, q scaled by Dk^-1/2). q, k [B, T, Hk, Dk], v [B, T, Hv, Dv].
// scale: q's factor (0: Dk^-1/2 in f64).
inline Tensor naive_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                               double scale = 0) {
  const int64_t B = q.size(0), T = q.size(1), Hk = q.size(2), Dk = q.size(3), Hv = v.size(2), Dv = v.size(3);
  const Tensor qn = lt::scale(naive_l2n(q), scale > 0 ? scale : 1.0 / std::sqrt(double(Dk))), kn = naive_l2n(k);
  std::vector<Tensor> outs(size_t(B * T * Hv));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hv; ++h) {
      const int64_t hk = h / (Hv / Hk);
      Tensor S = zeros({Dk, Dv}, DType::F64);
      for (int64_t t = 0; t < T; ++t) {
        auto row = [&](const Tensor& x, int64_t head, int64_t d) {
          return reshape(select(select(select(x, 0, b), 0, t), 0, head), {1, d});
        };
        const Tensor qt = row(qn, hk, Dk), kt = row(kn, hk, Dk), vt = row(v, h, Dv);
        const Tensor gt = reshape(select(select(select(g, 0, b), 0, t), 0, h), {1});
        const Tensor bt = reshape(select(select(select(beta, 0, b), 0, t), 0, h), {1});
        S = mul(S, exp(gt));
        const Tensor delta = mul(sub(vt, matmul(kt, S)), bt);
        S = add(S, matmul(kt, delta, true, false));
        outs[size_t((b * T + t) * Hv + h)] = matmul(qt, S);
      }
    }
  return reshape(concat(outs, 0), {B, T, Hv, Dv});
}


inline Tensor naive_decay(const Tensor& a, const Tensor& a_log, const Tensor& dt) {
  Tensor x = add(a, dt);  // softplus(x) = log(1 + exp(x)), x itself above 20
  Tensor sp = log(add_scalar(exp(x), 1.0));
  return mul(neg(exp(a_log)), sp);
}

// Causal depthwise conv: pad K - 1 zeros in front, then out[t] = sum_j w[:, j] x[t + j].
inline Tensor naive_conv(const Tensor& x, const Tensor& w, bool silu_after) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), K = w.size(1);
  Tensor xp = concat({zeros({B, K - 1, C}, DType::F64), x}, 1);
  Tensor acc;
  for (int64_t j = 0; j < K; ++j) {
    Tensor term = mul(slice(xp, 1, j, j + T), reshape(select(w, 1, j), {C}));
    acc = j == 0 ? term : add(acc, term);
  }
  return silu_after ? silu(acc) : acc;
}

inline Tensor naive_gated_norm(const Tensor& x, const Tensor& z, const Tensor& w, double eps) {
  const int64_t D = w.size(0);
  Shape s = x.shape();
  s.back() /= D;
  s.push_back(D);
  Tensor xh = reshape(x, s), zh = reshape(z, s);
  Tensor ms = div(sum(mul(xh, xh), {-1}, true), full({1}, double(D), DType::F64));
  Tensor y = mul(mul(div(xh, sqrt(add_scalar(ms, eps))), w), silu(zh));
  return reshape(y, x.shape());
}

}  // namespace lt::test::delta_ref
