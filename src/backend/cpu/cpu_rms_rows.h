// One RMSNorm row on the CPU, shared by rmsnorm_fwd / rmsnorm_bwd (cpu_norm.cpp) and the per-head
// norm (cpu_norm_heads.cpp). Compiled once, out of line (explicit instantiations in cpu_norm.cpp,
// never inlined), so that both ops run the same machine code on a row: the compiler's choices of
// vectorisation and FMA contraction differ from one caller's loop to another's, and the per-head
// op must equal rms_norm on the heads bit for bit.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/cpu/cpu_common.h"

namespace lt::cpu {

// The weight [c] as the row kernels take it: w + w_offset in the accumulation type.
template <class T> std::vector<acc_t<T>> rms_weight(const Tensor& w, int64_t c, float w_offset) {
  std::vector<acc_t<T>> wv(static_cast<size_t>(c));
  for (int64_t j = 0; j < c; ++j) wv[size_t(j)] = ld(w.data<T>(), j) + acc_t<T>(w_offset);
  return wv;
}

// y = x * rstd * w over c columns (w: the weight plus its offset, widened); returns rstd.
// buf: c accumulation-type scratch values.
template <class T>
acc_t<T> rms_row_fwd(T* y, const T* x, const acc_t<T>* w, int64_t c, float eps, acc_t<T>* buf);

// With xhat = x * r and g = dy * w: dx = r * (g - xhat * mean(g * xhat)); dw[j] += dy * xhat.
// xh, g: c accumulation-type scratch values each.
template <class T>
void rms_row_bwd(T* dx, acc_t<T>* dw, const T* dy, const T* x, const acc_t<T>* w, acc_t<T> r, int64_t c, acc_t<T>* xh,
                 acc_t<T>* g);

#define LT_CPU_RMS_ROWS(T)                                                                                     \
  extern template acc_t<T> rms_row_fwd<T>(T*, const T*, const acc_t<T>*, int64_t, float, acc_t<T>*);          \
  extern template void rms_row_bwd<T>(T*, acc_t<T>*, const T*, const T*, const acc_t<T>*, acc_t<T>, int64_t, \
                                      acc_t<T>*, acc_t<T>*);
LT_CPU_RMS_ROWS(float)
LT_CPU_RMS_ROWS(double)
LT_CPU_RMS_ROWS(bf16_t)
LT_CPU_RMS_ROWS(f16_t)
#undef LT_CPU_RMS_ROWS

}  // namespace lt::cpu
