// AdamW on host memory for --offload optimizer: scalar, AVX2 and AVX-512 paths of one update
// (see host_adamw.h). Each path spells the reference's f32 expression as explicit multiplies,
// adds, divides and square roots, all correctly rounded, in the reference's order:
//   g = grad*gs;  m = b1*m + (1-b1)*g;  v = b2*v + ((1-b2)*g)*g
//   p = p*decay - (step_size*m) / (sqrt(v)/bc2_sqrt + eps)
// The library is built with -march=x86-64-v3, which has FMA, and GCC contracts a*b+c into an FMA
// by default (also for intrinsics, which are vector expressions to it), so this file turns
// contraction off as cpu_optim.cpp does; the unit tests check the bits against the reference.
#include "offload/host_adamw.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "leantrain/error.h"
#include "offload/host_simd.h"
#include "core/knobs.h"

#pragma GCC optimize("fp-contract=off")
// GCC 12's AVX-512 headers self-initialise their "undefined" operands (__m512 __Y = __Y), which
// -Wmaybe-uninitialized reports once the intrinsics are inlined; a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace lt::offload {

namespace {

using namespace simd;

// Streaming stores (LEANTRAIN_HOST_STREAM_STORES, a measuring knob): 2 (default) for the 16-bit
// copy only, 1 for master and moments too, 0 none. Master and moments are read just before they
// are written, so their lines are in the cache and streaming them saves no read; on the 2-core
// development machine it cost 10-35% (a streamed line still in the cache is evicted first).
// The 16-bit copy goes to a buffer not read before (staging, a resting parameter): a streamed
// store spares its read for ownership, 2 of the 30 bytes an element moves.
// Read at first use, not at static initialisation: a malformed value is then a UsageError the
// CLI reports (it checks the environment first anyway), not a throw before main.
int stream_stores() {
  static const int n = int(knob_int("LEANTRAIN_HOST_STREAM_STORES"));
  return n;
}

// The per-step scalars, computed exactly as the reference computes them.
struct Consts {
  float gs, b1, omb1, b2, omb2, bc2_sqrt, eps, decay, step_size;
};

Consts consts_of(const AdamWArgs& a) {
  Consts c{};
  const float lr = a.lr;
  c.gs = a.grad_scale;
  c.b1 = a.beta1;
  c.b2 = a.beta2;
  c.omb1 = 1.0f - a.beta1;
  c.omb2 = 1.0f - a.beta2;
  c.eps = a.eps;
  c.decay = 1.0f - lr * a.weight_decay;
  const float bc1 = 1.0f - float(std::pow(double(a.beta1), double(a.step)));
  c.bc2_sqrt = float(std::sqrt(1.0 - std::pow(double(a.beta2), double(a.step))));
  c.step_size = lr / bc1;
  return c;
}

// Elements [lo, hi): the reference's scalar expression (also the SIMD paths' tail).
template <int G, int O> void scalar_range(const HostAdamWSpan& s, const Consts& c, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; ++i) {
    const float gi = load_grad<G>(s.grad, i) * c.gs;
    const float mi = c.b1 * s.exp_avg[i] + c.omb1 * gi;
    const float vi = c.b2 * s.exp_avg_sq[i] + c.omb2 * gi * gi;
    const float denom = std::sqrt(vi) / c.bc2_sqrt + c.eps;
    const float p = s.master[i] * c.decay - c.step_size * mi / denom;
    s.master[i] = p;
    s.exp_avg[i] = mi;
    s.exp_avg_sq[i] = vi;
    store_out<O>(s.param16, i, p);
  }
}

template <int G, int O> void avx2_range(const HostAdamWSpan& s, const Consts& c, int64_t lo, int64_t hi) {
  const __m256 gs = _mm256_set1_ps(c.gs), b1 = _mm256_set1_ps(c.b1), omb1 = _mm256_set1_ps(c.omb1);
  const __m256 b2 = _mm256_set1_ps(c.b2), omb2 = _mm256_set1_ps(c.omb2), bc2 = _mm256_set1_ps(c.bc2_sqrt);
  const __m256 eps = _mm256_set1_ps(c.eps), decay = _mm256_set1_ps(c.decay), step = _mm256_set1_ps(c.step_size);
  int64_t i = lo;
  for (; i + 8 <= hi; i += 8) {
    const __m256 g = _mm256_mul_ps(load_grad8<G>(s.grad, i), gs);
    const __m256 m = _mm256_add_ps(_mm256_mul_ps(b1, _mm256_loadu_ps(s.exp_avg + i)), _mm256_mul_ps(omb1, g));
    const __m256 v = _mm256_add_ps(_mm256_mul_ps(b2, _mm256_loadu_ps(s.exp_avg_sq + i)),
                                   _mm256_mul_ps(_mm256_mul_ps(omb2, g), g));
    const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(v), bc2), eps);
    const __m256 p = _mm256_sub_ps(_mm256_mul_ps(_mm256_loadu_ps(s.master + i), decay),
                                   _mm256_div_ps(_mm256_mul_ps(step, m), denom));
    _mm256_storeu_ps(s.master + i, p);
    _mm256_storeu_ps(s.exp_avg + i, m);
    _mm256_storeu_ps(s.exp_avg_sq + i, v);
    store_out8<O>(s.param16, i, p);
  }
  scalar_range<G, O>(s, c, i, hi);
}

// ---- AVX-512 (16 lanes; compiled for the target, run only where the CPU has it) ---------------

// The lines of master, m, v and the 16-bit copy are written whole: streaming stores (Nt) send them
// to memory without keeping them in the caches, which a 17 GB sweep would only evict again
// (and which the 16-bit copy, a buffer not read before, would first read for ownership).
template <int G, int O, int Nt> LT_AVX512 void avx512_loop(const HostAdamWSpan& s, const Consts& c, int64_t& i,
                                                            int64_t hi) {
  const __m512 gs = _mm512_set1_ps(c.gs), b1 = _mm512_set1_ps(c.b1), omb1 = _mm512_set1_ps(c.omb1);
  const __m512 b2 = _mm512_set1_ps(c.b2), omb2 = _mm512_set1_ps(c.omb2), bc2 = _mm512_set1_ps(c.bc2_sqrt);
  const __m512 eps = _mm512_set1_ps(c.eps), decay = _mm512_set1_ps(c.decay), step = _mm512_set1_ps(c.step_size);
  const int64_t pf = prefetch_distance();
  for (; i + 16 <= hi; i += 16) {
    if (pf) prefetch_ahead<G>(i + pf, s.grad, s.master, s.exp_avg, s.exp_avg_sq);
    const __m512 g = _mm512_mul_ps(load_grad16<G>(s.grad, i), gs);
    const __m512 m = _mm512_add_ps(_mm512_mul_ps(b1, _mm512_loadu_ps(s.exp_avg + i)), _mm512_mul_ps(omb1, g));
    const __m512 v = _mm512_add_ps(_mm512_mul_ps(b2, _mm512_loadu_ps(s.exp_avg_sq + i)),
                                   _mm512_mul_ps(_mm512_mul_ps(omb2, g), g));
    const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(v), bc2), eps);
    const __m512 p = _mm512_sub_ps(_mm512_mul_ps(_mm512_loadu_ps(s.master + i), decay),
                                   _mm512_div_ps(_mm512_mul_ps(step, m), denom));
    if constexpr (Nt == 1) {
      _mm512_stream_ps(s.master + i, p);
      _mm512_stream_ps(s.exp_avg + i, m);
      _mm512_stream_ps(s.exp_avg_sq + i, v);
    } else {
      _mm512_storeu_ps(s.master + i, p);
      _mm512_storeu_ps(s.exp_avg + i, m);
      _mm512_storeu_ps(s.exp_avg_sq + i, v);
    }
    store_out16<O, Nt != 0>(s.param16, i, p);
  }
}

template <int G, int O> LT_AVX512 void avx512_range(const HostAdamWSpan& s, const Consts& c, int64_t lo, int64_t hi) {
  const float* f32[3] = {s.master, s.exp_avg, s.exp_avg_sq};
  int64_t i = lo;
  // Streaming where the buffers' alignments agree (the pinned state does: 64-byte parts, chunks
  // of 64 elements), after a scalar head; ordinary stores otherwise.
  const int kStreamStores = stream_stores();
  const int64_t start = kStreamStores ? stream_start(lo, hi, f32, 3, O == kOutNone ? nullptr : s.param16) : hi;
  if (start + 16 <= hi) {
    scalar_range<G, O>(s, c, lo, start);
    i = start;
    if (kStreamStores == 1) avx512_loop<G, O, 1>(s, c, i, hi);
    else avx512_loop<G, O, 2>(s, c, i, hi);
    _mm_sfence();  // the streamed lines are in memory before the task reports done
  } else {
    avx512_loop<G, O, 0>(s, c, i, hi);
  }
  scalar_range<G, O>(s, c, i, hi);
}

using RangeFn = void (*)(const HostAdamWSpan&, const Consts&, int64_t, int64_t);

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

const char* simd_path_name(SimdPath p) {
  switch (p) {
    case SimdPath::Avx512: return "avx512";
    case SimdPath::Avx2: return "avx2";
    case SimdPath::Scalar: break;
  }
  return "scalar";
}

bool simd_path_available(SimdPath p) {
  if (p != SimdPath::Avx512) return true;
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
}

SimdPath best_simd_path() {
  return simd_path_available(SimdPath::Avx512) ? SimdPath::Avx512 : SimdPath::Avx2;
}

void host_adamw_step(const HostAdamWSpan& s, const AdamWArgs& args, int threads, SimdPath path) {
  LT_CHECK(args.sr.streams.empty(), "offloaded adamw: stochastic rounding of the 16-bit parameters",
           "the host optimizer step rounds to nearest only", "drop --stochastic-rounding with --offload optimizer");
  LT_CHECK(s.grad_dtype == DType::F32 || s.grad_dtype == DType::BF16 || s.grad_dtype == DType::F16,
           std::string("offloaded adamw: gradient dtype ") + dtype_name(s.grad_dtype),
           "the host step reads f32, bf16 or f16 gradients", "keep gradients in the parameters' dtype");
  LT_CHECK(!s.param16 || s.param16_dtype == DType::BF16 || s.param16_dtype == DType::F16,
           std::string("offloaded adamw: parameter copy dtype ") + dtype_name(s.param16_dtype),
           "the 16-bit copy is bf16 or f16", "use --dtype bf16 or f16");
  LT_CHECK(simd_path_available(path), std::string("offloaded adamw: the ") + simd_path_name(path) + " path",
           "this CPU does not have the instructions", "use best_simd_path()");
  LT_CHECK(threads >= 1, "offloaded adamw: " + std::to_string(threads) + " threads", "at least one is needed",
           "pass a positive thread count");
  if (s.n <= 0) return;
  const Consts c = consts_of(args);
  RangeFn fn = s.grad_dtype == DType::F32    ? range_fn<kGradF32>(s.param16_dtype, s.param16, path)
               : s.grad_dtype == DType::BF16 ? range_fn<kGradBF16>(s.param16_dtype, s.param16, path)
                                             : range_fn<kGradF16>(s.param16_dtype, s.param16, path);
  for_chunks(s.n, threads, [&](int64_t lo, int64_t hi) { fn(s, c, lo, hi); });
}

}  // namespace lt::offload
