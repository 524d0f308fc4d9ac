// Lion on host memory: scalar, AVX2 and AVX-512 paths of the reference's expression
//   g = grad*gs;  c = b1*m + (1-b1)*g;  p = p*decay - lr*sign(c);  m = b2*m + (1-b2)*g
// with sign(0) = sign(NaN) = 0 and the constants of backend/optim_consts.h (the reference's own).
// No FMA contraction, as in host_adamw.cpp (the reason is there).
#include "offload/host_lion.h"

#include <string>

#include "backend/optim_consts.h"
#include "leantrain/error.h"
#include "offload/host_simd.h"

#pragma GCC optimize("fp-contract=off")
// GCC 12's AVX-512 headers: see host_adamw.cpp.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace lt::offload {

namespace {

using namespace simd;
using Consts = LionConsts<float>;

inline float sign_of(float c) { return c > 0.0f ? 1.0f : (c < 0.0f ? -1.0f : 0.0f); }

template <int G, int O> void scalar_range(const HostLionSpan& s, const Consts& c, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; ++i) {
    const float gi = load_grad<G>(s.grad, i) * c.grad_scale;
    const float mi = s.exp_avg[i];
    const float ci = c.beta1 * mi + c.one_minus_beta1 * gi;
    const float p = s.master[i] * c.decay - c.lr * sign_of(ci);
    s.master[i] = p;
    s.exp_avg[i] = c.beta2 * mi + c.one_minus_beta2 * gi;
    store_out<O>(s.param16, i, p);
  }
}

template <int G, int O> void avx2_range(const HostLionSpan& s, const Consts& c, int64_t lo, int64_t hi) {
  const __m256 gs = _mm256_set1_ps(c.grad_scale), b1 = _mm256_set1_ps(c.beta1), omb1 = _mm256_set1_ps(c.one_minus_beta1);
  const __m256 b2 = _mm256_set1_ps(c.beta2), omb2 = _mm256_set1_ps(c.one_minus_beta2);
  const __m256 lr = _mm256_set1_ps(c.lr), decay = _mm256_set1_ps(c.decay);
  const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f), minus_one = _mm256_set1_ps(-1.0f);
  int64_t i = lo;
  for (; i + 8 <= hi; i += 8) {
    const __m256 g = _mm256_mul_ps(load_grad8<G>(s.grad, i), gs);
    const __m256 m = _mm256_loadu_ps(s.exp_avg + i);
    const __m256 ci = _mm256_add_ps(_mm256_mul_ps(b1, m), _mm256_mul_ps(omb1, g));
    // The two masks are disjoint and both false for 0 and NaN.
    const __m256 sign = _mm256_or_ps(_mm256_and_ps(_mm256_cmp_ps(ci, zero, _CMP_GT_OQ), one),
                                     _mm256_and_ps(_mm256_cmp_ps(ci, zero, _CMP_LT_OQ), minus_one));
    const __m256 p = _mm256_sub_ps(_mm256_mul_ps(_mm256_loadu_ps(s.master + i), decay), _mm256_mul_ps(lr, sign));
    _mm256_storeu_ps(s.master + i, p);
    _mm256_storeu_ps(s.exp_avg + i, _mm256_add_ps(_mm256_mul_ps(b2, m), _mm256_mul_ps(omb2, g)));
    store_out8<O>(s.param16, i, p);
  }
  scalar_range<G, O>(s, c, i, hi);
}

template <int G, int O> LT_AVX512 void avx512_range(const HostLionSpan& s, const Consts& c, int64_t lo, int64_t hi) {
  const __m512 gs = _mm512_set1_ps(c.grad_scale), b1 = _mm512_set1_ps(c.beta1), omb1 = _mm512_set1_ps(c.one_minus_beta1);
  const __m512 b2 = _mm512_set1_ps(c.beta2), omb2 = _mm512_set1_ps(c.one_minus_beta2);
  const __m512 lr = _mm512_set1_ps(c.lr), decay = _mm512_set1_ps(c.decay), zero = _mm512_setzero_ps();
  const int64_t pf = prefetch_distance();
  int64_t i = lo;
  for (; i + 16 <= hi; i += 16) {
    if (pf) prefetch_ahead<G>(i + pf, s.grad, s.master, s.exp_avg);
    const __m512 g = _mm512_mul_ps(load_grad16<G>(s.grad, i), gs);
    const __m512 m = _mm512_loadu_ps(s.exp_avg + i);
    const __m512 ci = _mm512_add_ps(_mm512_mul_ps(b1, m), _mm512_mul_ps(omb1, g));
    __m512 sign = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(ci, zero, _CMP_GT_OQ), zero, _mm512_set1_ps(1.0f));
    sign = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(ci, zero, _CMP_LT_OQ), sign, _mm512_set1_ps(-1.0f));
    const __m512 p = _mm512_sub_ps(_mm512_mul_ps(_mm512_loadu_ps(s.master + i), decay), _mm512_mul_ps(lr, sign));
    _mm512_storeu_ps(s.master + i, p);
    _mm512_storeu_ps(s.exp_avg + i, _mm512_add_ps(_mm512_mul_ps(b2, m), _mm512_mul_ps(omb2, g)));
    store_out16<O>(s.param16, i, p);
  }
  scalar_range<G, O>(s, c, i, hi);
}

using RangeFn = void (*)(const HostLionSpan&, const Consts&, int64_t, int64_t);

template <int G, int O> RangeFn range_fn(SimdPath path) {
  switch (path) {
    case SimdPath::Avx512: return &avx512_range<G, O>;
    case SimdPath::Avx2: return &avx2_range<G, O>;
    case SimdPath::Scalar: break;
  }
  return &scalar_range<G, O>;
}

template <int G> RangeFn range_fn(DType out_dtype, bool has_out, SimdPath path) {
  if (!has_out) return range_fn<G, kOutNone>(path);
  return out_dtype == DType::BF16 ? range_fn<G, kOutBF16>(path) : range_fn<G, kOutF16>(path);
}

}  // namespace

void host_lion_step(const HostLionSpan& s, const LionArgs& args, int threads, SimdPath path) {
  LT_CHECK(args.sr.streams.empty(), "offloaded lion: stochastic rounding of the 16-bit parameters",
           "the host optimizer step rounds to nearest only", "drop --stochastic-rounding with --offload optimizer");
  LT_CHECK(s.grad_dtype == DType::F32 || s.grad_dtype == DType::BF16 || s.grad_dtype == DType::F16,
           std::string("offloaded lion: gradient dtype ") + dtype_name(s.grad_dtype),
           "the host step reads f32, bf16 or f16 gradients", "keep gradients in the parameters' dtype");
  LT_CHECK(!s.param16 || s.param16_dtype == DType::BF16 || s.param16_dtype == DType::F16,
           std::string("offloaded lion: parameter copy dtype ") + dtype_name(s.param16_dtype),
           "the 16-bit copy is bf16 or f16", "use --dtype bf16 or f16");
  LT_CHECK(simd_path_available(path), std::string("offloaded lion: the ") + simd_path_name(path) + " path",
           "this CPU does not have the instructions", "use best_simd_path()");
  LT_CHECK(threads >= 1, "offloaded lion: " + std::to_string(threads) + " threads", "at least one is needed",
           "pass a positive thread count");
  if (s.n <= 0) return;
  const Consts c = lion_consts<float>(args);
  RangeFn fn = s.grad_dtype == DType::F32    ? range_fn<kGradF32>(s.param16_dtype, s.param16, path)
               : s.grad_dtype == DType::BF16 ? range_fn<kGradBF16>(s.param16_dtype, s.param16, path)
                                             : range_fn<kGradF16>(s.param16_dtype, s.param16, path);
  for_chunks(s.n, threads, [&](int64_t lo, int64_t hi) { fn(s, c, lo, hi); });
}

}  // namespace lt::offload
