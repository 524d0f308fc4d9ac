// The causal depthwise convolution over time (Gated DeltaNet's short convolution) with its SiLU,
// rounded as transformers' torch fallback rounds it: conv1d's output to the storage type, then
// silu's. The backward recomputes pre from x and w; dpre is stored rounded (as silu's backward
// stores it) before the transposed convolution and the weight's sums read it. With doc_pos the taps
// stop at each document's start (conv_tap_in_document).
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_common.h"
#include "backend/delta_docs.h"

namespace lt {
using namespace cpu;

namespace {

template <class A> A silu_of(A x) { return x / (A(1) + std::exp(-x)); }
template <class A> A silu_grad(A x) {
  const A s = A(1) / (A(1) + std::exp(-x));
  return s * (A(1) + x * (A(1) - s));
}

// pre[b, t, c] (rounded to T) of x [B, T, C] (strides sb, st, unit on C) and w [C, K]; dp: doc_pos
// [B, T] or null.
template <class T>
acc_t<T> conv_at(const T* x, const T* w, const int32_t* dp, int64_t b, int64_t t, int64_t c, int64_t T_len, int64_t K,
                 int64_t sb, int64_t stt) {
  using A = acc_t<T>;
  A acc = 0;
  for (int64_t j = 0; j < K; ++j) {
    const int64_t tt = t - K + 1 + j;
    if (conv_tap_in_document(dp, b, T_len, t, K - 1 - j)) acc += ld(w, c * K + j) * ld(x, b * sb + tt * stt + c);
  }
  return rounded<T>(acc);
}

}  // namespace

void CpuBackend::conv1d_causal_fwd(const Tensor& out, const Tensor& x, const Tensor& w, bool silu, const Tensor& doc_pos) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), K = w.size(1), sb = x.strides()[0], stt = x.strides()[1];
  const int32_t* dp = doc_pos.defined() ? doc_pos.data<int32_t>() : nullptr;
  dispatch_float(x.dtype(), [&](auto tag) {
    using S = decltype(tag);
    const S* px = x.data<S>();
    const S* pw = w.data<S>();
    S* po = out.data<S>();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < C; ++c) {
          const auto pre = conv_at(px, pw, dp, b, t, c, T, K, sb, stt);
          st(po, (b * T + t) * C + c, silu ? silu_of(pre) : pre);
        }
  });
}

void CpuBackend::conv1d_causal_bwd(const Tensor& dx, const Tensor& dw, const Tensor& dpre, const Tensor& dout,
                                   const Tensor& x, const Tensor& w, bool silu, const Tensor& doc_pos) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), K = w.size(1), sb = x.strides()[0], stt = x.strides()[1];
  const int32_t* dp = doc_pos.defined() ? doc_pos.data<int32_t>() : nullptr;
  dispatch_float(x.dtype(), [&](auto tag) {
    using S = decltype(tag);
    using A = acc_t<S>;
    const S* px = x.data<S>();
    const S* pw = w.data<S>();
    const S* pd = dout.data<S>();
    S* pp = dpre.data<S>();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < C; ++c) {
          const int64_t i = (b * T + t) * C + c;
          const A d = ld(pd, i);
          st(pp, i, silu ? d * silu_grad(conv_at(px, pw, dp, b, t, c, T, K, sb, stt)) : d);
        }
    if (dx.defined())
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t)
          for (int64_t c = 0; c < C; ++c) {
            A acc = 0;  // x[t] feeds pre[t + K - 1 - j] through w[c, j] (inside its document)
            for (int64_t j = 0; j < K; ++j) {
              const int64_t to = t + K - 1 - j;
              if (to < T && conv_tap_in_document(dp, b, T, to, K - 1 - j))
                acc += ld(pw, c * K + j) * ld(pp, (b * T + to) * C + c);
            }
            st(dx.data<S>(), (b * T + t) * C + c, acc);
          }
    if (dw.defined())
      for (int64_t c = 0; c < C; ++c)
        for (int64_t j = 0; j < K; ++j) {
          A acc = 0;
          for (int64_t b = 0; b < B; ++b)
            for (int64_t t = 0; t < T; ++t) {
              const int64_t tt = t - K + 1 + j;
              if (conv_tap_in_document(dp, b, T, t, K - 1 - j)) acc += ld(pp, (b * T + t) * C + c) * ld(px, b * sb + tt * stt + c);
            }
          dispatch_float(dw.dtype(), [&](auto wtag) { st(dw.data<decltype(wtag)>(), c * K + j, acc_t<decltype(wtag)>(acc)); });
        }
  });
}

}  // namespace lt
