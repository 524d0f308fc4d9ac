// GEMM through OpenBLAS for f32/f64; f16/bf16 operands are widened to f32 scratch first
// (host scratch, outside the allocator: the CPU is the reference, not a prediction target).
// Row strides (lda, ldb, ldc) go to BLAS as they are; the padding between rows is neither read
// as data nor written.
#include <cblas.h>

#include <vector>

#include "backend/cpu/blas_call.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_common.h"

namespace lt {
using namespace cpu;

namespace {

template <class T> std::vector<float> widen(const T* p, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = load(p, i);
  return out;
}

// Elements from a view's first element to its last, inclusive (a padded-row view spans more
// than its numel).
int64_t extent(const Tensor& t) {
  if (t.numel() == 0) return 0;
  int64_t e = 1;
  for (size_t d = 0; d < t.shape().size(); ++d) e += (t.shape()[d] - 1) * t.strides()[d];
  return e;
}

}  // namespace

void CpuBackend::gemm(const Tensor& c, const Tensor& a, const Tensor& b, const GemmDesc& d, const Tensor& bias) {
  const BlasCall blas_call;
  const CBLAS_TRANSPOSE ta = d.trans_a ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = d.trans_b ? CblasTrans : CblasNoTrans;
  const int lda = int(d.ld_a());
  const int ldb = int(d.ld_b());
  const int ldc = int(d.ld_c());
  auto add_bias = [&](auto* cp, const auto* bp) {
    for (int64_t bi = 0; bi < d.batch; ++bi)
      for (int64_t i = 0; i < d.m; ++i)
        for (int64_t j = 0; j < d.n; ++j) cp[bi * d.stride_c + i * ldc + j] += bp[j];
  };
  if (c.dtype() == DType::F64) {
    const double* pa = a.data<double>();
    const double* pb = b.data<double>();
    double* pc = c.data<double>();
    for (int64_t i = 0; i < d.batch; ++i)
      cblas_dgemm(CblasRowMajor, ta, tb, int(d.m), int(d.n), int(d.k), d.alpha, pa + i * d.stride_a, lda,
                  pb + i * d.stride_b, ldb, d.beta, pc + i * d.stride_c, ldc);
    if (bias.defined()) add_bias(pc, bias.data<double>());
    return;
  }
  if (c.dtype() == DType::F32 && a.dtype() != DType::F32) {
    // 16-bit operands into an f32 output (a weight gradient under autocast): widened, multiplied
    // in f32, stored unrounded.
    LT_CHECK((a.dtype() == DType::BF16 || a.dtype() == DType::F16) && b.dtype() == a.dtype() && !bias.defined(),
             std::string("gemm: ") + dtype_name(a.dtype()) + " x " + dtype_name(b.dtype()) + " into f32",
             "an f32 output takes f32 operands, or two 16-bit operands of one dtype and no bias",
             "cast the operands to one dtype");
    dispatch_float(a.dtype(), [&](auto tag) {
      using T = decltype(tag);
      std::vector<float> fa = widen(a.data<T>(), extent(a));
      std::vector<float> fb = widen(b.data<T>(), extent(b));
      float* pc = c.data<float>();
      for (int64_t i = 0; i < d.batch; ++i)
        cblas_sgemm(CblasRowMajor, ta, tb, int(d.m), int(d.n), int(d.k), d.alpha, fa.data() + i * d.stride_a, lda,
                    fb.data() + i * d.stride_b, ldb, d.beta, pc + i * d.stride_c, ldc);
    });
    return;
  }
  if (c.dtype() == DType::F32) {
    const float* pa = a.data<float>();
    const float* pb = b.data<float>();
    float* pc = c.data<float>();
    for (int64_t i = 0; i < d.batch; ++i)
      cblas_sgemm(CblasRowMajor, ta, tb, int(d.m), int(d.n), int(d.k), d.alpha, pa + i * d.stride_a, lda,
                  pb + i * d.stride_b, ldb, d.beta, pc + i * d.stride_c, ldc);
    if (bias.defined()) add_bias(pc, bias.data<float>());
    return;
  }
  // 16-bit storage: compute in f32, round once on store.
  dispatch_float(c.dtype(), [&](auto tag) {
    using T = decltype(tag);
    std::vector<float> fa = widen(a.data<T>(), extent(a));
    std::vector<float> fb = widen(b.data<T>(), extent(b));
    std::vector<float> fc = widen(c.data<T>(), extent(c));
    for (int64_t i = 0; i < d.batch; ++i)
      cblas_sgemm(CblasRowMajor, ta, tb, int(d.m), int(d.n), int(d.k), d.alpha, fa.data() + i * d.stride_a, lda,
                  fb.data() + i * d.stride_b, ldb, d.beta, fc.data() + i * d.stride_c, ldc);
    if (bias.defined()) {
      std::vector<float> fbias = widen(bias.data<T>(), bias.numel());
      add_bias(fc.data(), fbias.data());
    }
    T* pc = c.data<T>();
    for (int64_t bi = 0; bi < d.batch; ++bi)  // the product's elements only: a row's padding stays untouched
      for (int64_t i = 0; i < d.m; ++i)
        for (int64_t j = 0; j < d.n; ++j) {
          const int64_t at = bi * d.stride_c + i * ldc + j;
          store(pc, at, fc[size_t(at)]);
        }
  });
}

void CpuBackend::gemm_gelu(const Tensor& c, const Tensor& pre, const Tensor& a, const Tensor& b, const GemmDesc& d,
                           const Tensor& bias) {
  gemm(pre, a, b, d, bias);
  unary(UnaryOp::GeluTanh, c, pre, 0.f);
}

void CpuBackend::gemm_bgrad(const Tensor& c, const Tensor& bgrad, const Tensor& a, const Tensor& b, const GemmDesc& d,
                            bool bgrad_of_b) {
  gemm(c, a, b, d, Tensor());
  const Tensor& g = bgrad_of_b ? b : a;
  const int64_t len = bgrad_of_b ? d.n : d.m;
  reduce_sum(make_view(bgrad, {1, len}, {len, 1}, bgrad.offset()), make_view(g, {d.k, len}, {len, 1}, g.offset()));
}

void CpuBackend::gemm_dgelu(const Tensor& c, const Tensor& a, const Tensor& b, const GemmDesc& d, const Tensor& pre) {
  gemm(c, a, b, d, Tensor());
  unary_backward(UnaryOp::GeluTanh, c, c, pre, 0.f);
}

}  // namespace lt
