// Per-head RMSNorm of a packed projection (Qwen3's q_norm / k_norm) on the CPU. Each head of D
// columns is one row of rmsnorm_fwd / rmsnorm_bwd, through their own row kernels (cpu_rms_rows.h),
// so the op equals slicing the heads out and calling rms_norm on them, bit for bit. The weights'
// gradients are summed over every head row in order into part 0 (backend_ops.def).
#include <algorithm>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_common.h"
#include "backend/cpu/cpu_rms_rows.h"

namespace lt {
using namespace cpu;

namespace {

void check_heads(const char* op, const Tensor& x, const Tensor& wa, const Tensor& wb, int64_t ha, int64_t hb,
                 int64_t D) {
  LT_CHECK(x.dim() == 2 && x.strides()[1] == 1 && D > 0 && ha >= 0 && hb >= 0 && (ha + hb) * D <= x.size(1) &&
               wa.numel() == D && wb.numel() == D && wa.dtype() == x.dtype() && wb.dtype() == x.dtype(),
           std::string(op) + ": x " + shape_str(x.shape()) + ", " + std::to_string(ha) + " + " + std::to_string(hb) +
               " heads of " + std::to_string(D),
           "x is [N, W] with unit column stride and W >= (ha + hb) D; wa and wb [D] of x's dtype",
           "pass the op front-end's views");
}

}  // namespace

void CpuBackend::rmsnorm_heads_fwd(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& wa,
                                   const Tensor& wb, int64_t ha, int64_t hb, int64_t D, float eps, float w_offset) {
  check_heads("rmsnorm_heads_fwd", x, wa, wb, ha, hb, D);
  const int64_t N = x.size(0), W = x.size(1), xs = x.strides()[0], H = ha + hb;
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const std::vector<A> va = rms_weight<T>(wa, D, w_offset), vb = rms_weight<T>(wb, D, w_offset);
    std::vector<A> row(static_cast<size_t>(D));
    const T* px = x.data<T>();
    T* py = y.data<T>();
    A* pr = aux_data<A>(rstd);
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t h = 0; h < H; ++h) {
        const std::vector<A>& wv = h < ha ? va : vb;
        pr[n * H + h] = rms_row_fwd(py + n * W + h * D, px + n * xs + h * D, wv.data(), D, eps, row.data());
      }
      std::copy(px + n * xs + H * D, px + n * xs + W, py + n * W + H * D);  // the passthrough columns
    }
  });
}

void CpuBackend::rmsnorm_heads_bwd(const Tensor& dx, const Tensor& dwa_parts, const Tensor& dwb_parts, const Tensor& dy,
                                   const Tensor& x, const Tensor& wa, const Tensor& wb, const Tensor& rstd, int64_t ha,
                                   int64_t hb, int64_t D, float w_offset) {
  check_heads("rmsnorm_heads_bwd", x, wa, wb, ha, hb, D);
  const int64_t N = x.size(0), W = x.size(1), xs = x.strides()[0], H = ha + hb;
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const std::vector<A> va = rms_weight<T>(wa, D, w_offset), vb = rms_weight<T>(wb, D, w_offset);
    const size_t d = static_cast<size_t>(D);
    std::vector<A> xh(d), g(d), dwa(d, A(0)), dwb(d, A(0));
    const T *px = x.data<T>(), *pdy = dy.data<T>();
    T* pdx = dx.data<T>();
    const A* pr = aux_data<A>(rstd);
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t h = 0; h < H; ++h) {
        const std::vector<A>& wv = h < ha ? va : vb;
        std::vector<A>& dw = h < ha ? dwa : dwb;
        rms_row_bwd(pdx + n * W + h * D, dw.data(), pdy + n * W + h * D, px + n * xs + h * D, wv.data(), pr[n * H + h],
                    D, xh.data(), g.data());
      }
      std::copy(pdy + n * W + H * D, pdy + n * W + W, pdx + n * W + H * D);  // the passthrough columns
    }
    auto store_parts = [&](const Tensor& parts, const std::vector<A>& sums) {
      if (!parts.defined()) return;
      A* p = aux_data<A>(parts);
      std::fill(p, p + parts.numel(), A(0));
      if (parts.numel() > 0) std::copy(sums.begin(), sums.end(), p);
    };
    store_parts(dwa_parts, dwa);
    store_parts(dwb_parts, dwb);
  });
}

}  // namespace lt
