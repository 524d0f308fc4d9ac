// SGD on host memory: scalar, AVX2 and AVX-512 paths of the reference's expression
//   g = grad*gs + wd*p;  buf = first_step ? g : mom*buf + (1-damp)*g;  g = nesterov ? g + mom*buf : buf
//   p = p - lr*g                                   (the buffer lines only with a momentum buffer)
// No FMA contraction, as in host_adamw.cpp (the reason is there).
#include "offload/host_sgd.h"

#include <string>

#include "leantrain/error.h"
#include "offload/host_simd.h"

#pragma GCC optimize("fp-contract=off")
// GCC 12's AVX-512 headers: see host_adamw.cpp.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace lt::offload {

namespace {

using namespace simd;

struct Consts {
  float lr, mom, omd, wd, gs;  // omd = 1 - dampening, in f32 as the reference computes it
  bool first_step, nesterov;
};

template <int G, int O> void scalar_range(const HostSgdSpan& s, const Consts& c, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; ++i) {
    const float pi = s.master[i];
    float gi = load_grad<G>(s.grad, i) * c.gs + c.wd * pi;
    if (s.momentum_buf) {
      const float bi = c.first_step ? gi : c.mom * s.momentum_buf[i] + c.omd * gi;
      s.momentum_buf[i] = bi;
      gi = c.nesterov ? gi + c.mom * bi : bi;
    }
    const float p = pi - c.lr * gi;
    s.master[i] = p;
    store_out<O>(s.param16, i, p);
  }
}

template <int G, int O> void avx2_range(const HostSgdSpan& s, const Consts& c, int64_t lo, int64_t hi) {
  const __m256 lr = _mm256_set1_ps(c.lr), mom = _mm256_set1_ps(c.mom), omd = _mm256_set1_ps(c.omd);
  const __m256 wd = _mm256_set1_ps(c.wd), gs = _mm256_set1_ps(c.gs);
  int64_t i = lo;
  for (; i + 8 <= hi; i += 8) {
    const __m256 pi = _mm256_loadu_ps(s.master + i);
    __m256 g = _mm256_add_ps(_mm256_mul_ps(load_grad8<G>(s.grad, i), gs), _mm256_mul_ps(wd, pi));
    if (s.momentum_buf) {
      const __m256 b = c.first_step ? g
                                    : _mm256_add_ps(_mm256_mul_ps(mom, _mm256_loadu_ps(s.momentum_buf + i)),
                                                    _mm256_mul_ps(omd, g));
      _mm256_storeu_ps(s.momentum_buf + i, b);
      g = c.nesterov ? _mm256_add_ps(g, _mm256_mul_ps(mom, b)) : b;
    }
    const __m256 p = _mm256_sub_ps(pi, _mm256_mul_ps(lr, g));
    _mm256_storeu_ps(s.master + i, p);
    store_out8<O>(s.param16, i, p);
  }
  scalar_range<G, O>(s, c, i, hi);
}

template <int G, int O> LT_AVX512 void avx512_range(const HostSgdSpan& s, const Consts& c, int64_t lo, int64_t hi) {
  const __m512 lr = _mm512_set1_ps(c.lr), mom = _mm512_set1_ps(c.mom), omd = _mm512_set1_ps(c.omd);
  const __m512 wd = _mm512_set1_ps(c.wd), gs = _mm512_set1_ps(c.gs);
  const int64_t pf = prefetch_distance();
  int64_t i = lo;
  for (; i + 16 <= hi; i += 16) {
    if (pf) prefetch_ahead<G>(i + pf, s.grad, s.master, s.momentum_buf);
    const __m512 pi = _mm512_loadu_ps(s.master + i);
    __m512 g = _mm512_add_ps(_mm512_mul_ps(load_grad16<G>(s.grad, i), gs), _mm512_mul_ps(wd, pi));
    if (s.momentum_buf) {
      const __m512 b = c.first_step ? g
                                    : _mm512_add_ps(_mm512_mul_ps(mom, _mm512_loadu_ps(s.momentum_buf + i)),
                                                    _mm512_mul_ps(omd, g));
      _mm512_storeu_ps(s.momentum_buf + i, b);
      g = c.nesterov ? _mm512_add_ps(g, _mm512_mul_ps(mom, b)) : b;
    }
    const __m512 p = _mm512_sub_ps(pi, _mm512_mul_ps(lr, g));
    _mm512_storeu_ps(s.master + i, p);
    store_out16<O>(s.param16, i, p);
  }
  scalar_range<G, O>(s, c, i, hi);
}

using RangeFn = void (*)(const HostSgdSpan&, const Consts&, int64_t, int64_t);

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

void host_sgd_step(const HostSgdSpan& s, const SgdArgs& a, int threads, SimdPath path) {
  LT_CHECK(a.sr.streams.empty(), "offloaded sgd: stochastic rounding of the 16-bit parameters",
           "the host optimizer step rounds to nearest only", "drop --stochastic-rounding with --offload optimizer");
  LT_CHECK(s.grad_dtype == DType::F32 || s.grad_dtype == DType::BF16 || s.grad_dtype == DType::F16,
           std::string("offloaded sgd: gradient dtype ") + dtype_name(s.grad_dtype),
           "the host step reads f32, bf16 or f16 gradients", "keep gradients in the parameters' dtype");
  LT_CHECK(!s.param16 || s.param16_dtype == DType::BF16 || s.param16_dtype == DType::F16,
           std::string("offloaded sgd: parameter copy dtype ") + dtype_name(s.param16_dtype),
           "the 16-bit copy is bf16 or f16", "use --dtype bf16 or f16");
  LT_CHECK(simd_path_available(path), std::string("offloaded sgd: the ") + simd_path_name(path) + " path",
           "this CPU does not have the instructions", "use best_simd_path()");
  LT_CHECK(threads >= 1, "offloaded sgd: " + std::to_string(threads) + " threads", "at least one is needed",
           "pass a positive thread count");
  if (s.n <= 0) return;
  const Consts c{a.lr, a.momentum, 1.0f - a.dampening, a.weight_decay, a.grad_scale, a.first_step, a.nesterov};
  RangeFn fn = s.grad_dtype == DType::F32    ? range_fn<kGradF32>(s.param16_dtype, s.param16, path)
               : s.grad_dtype == DType::BF16 ? range_fn<kGradBF16>(s.param16_dtype, s.param16, path)
                                             : range_fn<kGradF16>(s.param16_dtype, s.param16, path);
  for_chunks(s.n, threads, [&](int64_t lo, int64_t hi) { fn(s, c, lo, hi); });
}

}  // namespace lt::offload
