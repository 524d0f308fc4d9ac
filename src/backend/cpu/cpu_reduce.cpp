#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_common.h"

namespace lt {
using namespace cpu;

void CpuBackend::reduce_sum(const Tensor& out, const Tensor& in) {
  // out has in's rank with 1 on reduced dims. Walk `in` once, adding into out's cell.
  const Shape& shape = in.shape();
  const int64_t n = in.numel();
  const int64_t nout = out.numel();
  Shape out_strides = out.strides();
  for (size_t d = 0; d < shape.size(); ++d)
    if (out.shape()[d] == 1) out_strides[d] = 0;
  // out is in's dtype, or f32 for 16-bit in (the f32 sums, not rounded to 16 bits).
  const bool widen = out.dtype() == DType::F32 && (in.dtype() == DType::BF16 || in.dtype() == DType::F16);
  LT_CHECK(out.dtype() == in.dtype() || widen, std::string("reduce_sum: ") + dtype_name(out.dtype()) + " sums of " +
                                                   dtype_name(in.dtype()),
           "out must have in's dtype, or f32 for 16-bit in", "allocate the output in one of those");
  dispatch_float(in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    std::vector<A> acc(size_t(nout), A(0));
    const T* pin = in.data<T>();
    const int64_t last = shape.empty() ? 1 : shape.back();
    const bool reduce_last_only = nout * last == n && (shape.empty() || out.shape().back() == 1);
    if (reduce_last_only) {  // rows -> one value each
      for (int64_t r = 0; r < nout; ++r) {
        A s = 0;
        for (int64_t j = 0; j < last; ++j) s += ld(pin, r * last + j);
        acc[size_t(r)] = s;
      }
    } else if (!shape.empty() && out.shape().back() == last && nout == last) {  // columns (bias grad)
      for (int64_t i = 0; i < n; ++i) acc[size_t(i % last)] += ld(pin, i);
    } else {
      for (int64_t i = 0; i < n; ++i) acc[size_t(strided_offset(i, shape, out_strides))] += ld(pin, i);
    }
    if (widen) {
      float* po = out.data<float>();
      for (int64_t i = 0; i < nout; ++i) po[i] = float(acc[size_t(i)]);
    } else {
      T* po = out.data<T>();
      for (int64_t i = 0; i < nout; ++i) st(po, i, acc[size_t(i)]);
    }
  });
}

void CpuBackend::argmax_lastdim(const Tensor& out, const Tensor& x) {
  const int64_t last = x.shape().back();
  const int64_t rows = x.numel() / last;
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    int64_t* po = out.data<int64_t>();
    for (int64_t r = 0; r < rows; ++r) {
      int64_t best = 0;
      float bv = load(px, r * last);
      for (int64_t j = 1; j < last; ++j) {
        float v = load(px, r * last + j);
        if (v > bv) { bv = v; best = j; }
      }
      po[r] = best;
    }
  });
}

void CpuBackend::sum_squares(const Tensor& out, std::span<const Tensor> xs) {
  double total = 0;
  for (const Tensor& x : xs) {
    const int64_t n = x.numel();
    dispatch_float(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* p = x.data<T>();
      double s = 0;
      for (int64_t i = 0; i < n; ++i) {
        double v = double(ld(p, i));
        s += v * v;
      }
      total += s;
    });
  }
  if (out.dtype() == DType::F64) out.data<double>()[0] += total;
  else out.data<float>()[0] += float(total);
}

}  // namespace lt
