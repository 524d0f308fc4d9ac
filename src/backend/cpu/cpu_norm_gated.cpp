// The gated RMSNorm of Gated DeltaNet (transformers' Qwen3_5RMSNormGated) on the CPU, rounded as
// its torch ops round: the normalised rows to the storage type, their product with the weight
// (of that dtype) again, then the product with silu(z) in A, once more. The backward follows the
// same ops back: silu's and the products' gradients rounded where torch stores them.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_common.h"

namespace lt {
using namespace cpu;

namespace {

}  // namespace

void CpuBackend::rmsnorm_gated_fwd(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& z,
                                   const Tensor& w, float eps) {
  const int64_t N = x.size(0), D = w.size(0), G = x.size(1) / D, zs = z.strides()[0];
  dispatch_float(x.dtype(), [&](auto tag) {
    using S = decltype(tag);
    using A = acc_t<S>;
    const S *px = x.data<S>(), *pz = z.data<S>(), *pw = w.data<S>();
    S* py = y.data<S>();
    A* pr = aux_data<A>(rstd);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t g = 0; g < G; ++g) {
        const int64_t xo = n * G * D + g * D, zo = n * zs + g * D;
        A ss = 0;
        for (int64_t i = 0; i < D; ++i) ss += ld(px, xo + i) * ld(px, xo + i);
        const A r = A(1) / std::sqrt(ss / A(D) + A(eps));
        pr[n * G + g] = r;
        for (int64_t i = 0; i < D; ++i) {
          const A nrm = rounded<S>(ld(px, xo + i) * r);
          const A p = rounded<S>(ld(pw, i) * nrm);
          const A zz = ld(pz, zo + i);
          st(py, xo + i, p * (zz / (A(1) + std::exp(-zz))));
        }
      }
  });
}

void CpuBackend::rmsnorm_gated_bwd(const Tensor& dx, const Tensor& dz, const Tensor& dw_parts, const Tensor& dy,
                                   const Tensor& x, const Tensor& z, const Tensor& w, const Tensor& rstd) {
  const int64_t N = x.size(0), D = w.size(0), G = x.size(1) / D, zs = z.strides()[0];
  const bool want_w = dw_parts.defined();
  const int64_t R = N * G, P = want_w ? dw_parts.size(0) : 1, L = (R + P - 1) / P;
  dispatch_float(x.dtype(), [&](auto tag) {
    using S = decltype(tag);
    using A = acc_t<S>;
    const S *px = x.data<S>(), *pz = z.data<S>(), *pw = w.data<S>(), *pdy = dy.data<S>();
    const A* pr = aux_data<A>(rstd);
    A* parts = want_w ? aux_data<A>(dw_parts) : nullptr;  // null: w takes no gradient
    if (parts) std::fill(parts, parts + P * D, A(0));
    std::vector<A> dn(static_cast<size_t>(D));
    for (int64_t row = 0; row < R; ++row) {
      const int64_t n = row / G, g = row % G, xo = n * G * D + g * D, zo = n * zs + g * D;
      const A r = pr[row];
      A* part = parts ? parts + (row / L) * D : nullptr;
      A dot = 0;
      for (int64_t i = 0; i < D; ++i) {
        const A xv = ld(px, xo + i), nrm = rounded<S>(xv * r), wv = ld(pw, i);
        const A p = rounded<S>(wv * nrm);
        const A zz = ld(pz, zo + i), sg = A(1) / (A(1) + std::exp(-zz)), s = zz * sg;
        const A d = ld(pdy, xo + i);
        const A dp = rounded<S>(d * s);            // y = p * s: p's gradient, stored in p's dtype
        const A dsilu = d * p;                     // s's (f32 in torch)
        st(dz.data<S>(), xo + i, dsilu * sg * (A(1) + zz * (A(1) - sg)));
        if (part) part[i] += dp * nrm;             // w's
        dn[size_t(i)] = rounded<S>(dp * wv);       // nrm's, stored in its dtype
        dot += dn[size_t(i)] * xv * r;
      }
      // n = x r, r = (mean x^2 + eps)^-1/2: dx = r (dn - n mean(n dn))
      for (int64_t i = 0; i < D; ++i) st(dx.data<S>(), xo + i, r * (dn[size_t(i)] - ld(px, xo + i) * r * dot / A(D)));
    }
  });
}

}  // namespace lt
