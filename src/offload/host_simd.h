// Loads and stores shared by the host optimizer steps of --offload (host_adamw.cpp, host_lion.cpp):
// gradients widened from bf16/f16/f32 and the updated parameter rounded to bf16/f16 exactly as
// leantrain/dtype.h's float_to_bf16 / float_to_half round, in scalar, AVX2 (8 lanes) and AVX-512
// (16 lanes, functions compiled for that target: call them only where the CPU has it).
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "leantrain/dtype.h"
#include "offload/host_workers.h"
#include "core/knobs.h"

namespace lt::offload::simd {

enum GradKind { kGradF32, kGradBF16, kGradF16 };
enum OutKind { kOutNone, kOutBF16, kOutF16 };

template <int G> inline float load_grad(const void* g, int64_t i) {
  if constexpr (G == kGradF32) return static_cast<const float*>(g)[i];
  if constexpr (G == kGradBF16) return bf16_to_float(static_cast<const uint16_t*>(g)[i]);
  if constexpr (G == kGradF16) return half_to_float(static_cast<const uint16_t*>(g)[i]);
}

template <int O> inline void store_out(void* out, int64_t i, float p) {
  if constexpr (O == kOutBF16) static_cast<uint16_t*>(out)[i] = float_to_bf16(p);
  if constexpr (O == kOutF16) static_cast<uint16_t*>(out)[i] = float_to_half(p);
}

// Software prefetch distance in elements (LEANTRAIN_HOST_PREFETCH, a measuring knob; 0: none;
// default 512, 2 KiB of f32 ahead). The step is bound by the cache misses each core keeps in
// flight as much as by the memory: prefetching master, moments and gradient ahead (also across
// 4 KiB pages, where the hardware prefetchers stop) raises that number. On the 2-core development
// machine: 256-1024 all about 10% faster than none, 2048 no better than none.
// Used by every host step's AVX-512 loop.
inline int64_t prefetch_distance() {
  static const int64_t d = knob_int("LEANTRAIN_HOST_PREFETCH") / 16 * 16;
  return d;
}

// Prefetches element i of the gradient and of each f32 array given (null ones skipped); a
// prefetch past an array's end is harmless (it never faults).
// (Addresses as integers: pointer arithmetic past an array's end would be undefined.)
inline void prefetch_at(const void* p, int64_t byte_offset) {
  if (p) _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(p) + uintptr_t(byte_offset)), _MM_HINT_T0);
}
template <int G, class... F> inline void prefetch_ahead(int64_t i, const void* grad, F... f32) {
  prefetch_at(grad, i * (G == kGradF32 ? 4 : 2));
  (prefetch_at(f32, i * 4), ...);
}


// ---- AVX2 (8 lanes) -------------------------------------------------------------------------

template <int G> inline __m256 load_grad8(const void* g, int64_t i) {
  if constexpr (G == kGradF32) return _mm256_loadu_ps(static_cast<const float*>(g) + i);
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(g) + i));
  if constexpr (G == kGradBF16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  else return _mm256_cvtph_ps(h);  // f16 -> f32 is exact
}

// float_to_bf16 on 8 lanes, as 32-bit lanes holding the 16-bit results.
inline __m256i bf16_bits8(__m256 p) {
  const __m256i u = _mm256_castps_si256(p);
  const __m256i hi = _mm256_srli_epi32(u, 16);
  const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                         _mm256_set1_epi32(0x7f800000));
  return _mm256_blendv_epi8(rounded, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
}

// 8 32-bit lanes holding values <= 0xffff -> 8 16-bit values (unsigned saturation is the identity).
inline __m128i narrow8(__m256i x) {
  return _mm_packus_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1));
}

template <int O> inline void store_out8(void* out, int64_t i, __m256 p) {
  if constexpr (O == kOutNone) return;
  __m128i* dst = reinterpret_cast<__m128i*>(static_cast<uint16_t*>(out) + i);
  if constexpr (O == kOutBF16) {
    _mm_storeu_si128(dst, narrow8(bf16_bits8(p)));
  } else if constexpr (O == kOutF16) {
    // F16C rounds to nearest even with float_to_half's overflow and subnormal results; only a NaN
    // differs (F16C keeps the payload), so NaN lanes get float_to_half's sign | 0x7e00.
    const __m128i h = _mm256_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(p), 16), _mm256_set1_epi32(0x8000));
    const __m128i qnan = narrow8(_mm256_or_si256(sign, _mm256_set1_epi32(0x7e00)));
    const __m256i nan32 = _mm256_castps_si256(_mm256_cmp_ps(p, p, _CMP_UNORD_Q));
    const __m128i nan16 = _mm_packs_epi32(_mm256_castsi256_si128(nan32), _mm256_extracti128_si256(nan32, 1));
    _mm_storeu_si128(dst, _mm_blendv_epi8(h, qnan, nan16));
  }
}

// ---- AVX-512 (16 lanes; compiled for the target, run only where the CPU has it) ---------------

#define LT_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

template <int G> LT_AVX512 inline __m512 load_grad16(const void* g, int64_t i) {
  if constexpr (G == kGradF32) return _mm512_loadu_ps(static_cast<const float*>(g) + i);
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(g) + i));
  if constexpr (G == kGradBF16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  else return _mm512_cvtph_ps(h);
}

// Nt: a non-temporal (streaming) store, whose address must be 32-byte aligned.
template <int O, bool Nt = false> LT_AVX512 inline void store_out16(void* out, int64_t i, __m512 p) {
  if constexpr (O == kOutNone) return;
  __m256i* dst = reinterpret_cast<__m256i*>(static_cast<uint16_t*>(out) + i);
  const __m512i u = _mm512_castps_si512(p);
  const __m512i hi = _mm512_srli_epi32(u, 16);
  if constexpr (O == kOutBF16) {
    const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
    const __m512i rounded =
        _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                  _mm512_set1_epi32(0x7f800000));
    const __m512i bits = _mm512_mask_blend_epi32(nan, rounded, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
    if constexpr (Nt) _mm256_stream_si256(dst, _mm512_cvtepi32_epi16(bits));
    else _mm256_storeu_si256(dst, _mm512_cvtepi32_epi16(bits));
  } else if constexpr (O == kOutF16) {
    const __m256i h = _mm512_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512i qnan = _mm512_or_si512(_mm512_and_si512(hi, _mm512_set1_epi32(0x8000)), _mm512_set1_epi32(0x7e00));
    const __mmask16 nan = _mm512_cmp_ps_mask(p, p, _CMP_UNORD_Q);
    if constexpr (Nt) _mm256_stream_si256(dst, _mm256_mask_blend_epi16(nan, h, _mm512_cvtepi32_epi16(qnan)));
    else _mm256_storeu_si256(dst, _mm256_mask_blend_epi16(nan, h, _mm512_cvtepi32_epi16(qnan)));
  }
}

// The first index in [lo, hi) from which every pointer given (byte address + i * element size)
// sits on its alignment, or hi when none does before the end: where a loop of streaming
// (non-temporal) stores may start. The pointers' elements are f32 (4 bytes, 64-byte lines) or
// 16-bit (2 bytes, 32-byte rows of 16); a null pointer is skipped.
inline int64_t stream_start(int64_t lo, int64_t hi, const float* const* f32, int n32, const void* out16) {
  auto at = [](const void* p, int64_t i, int64_t size, uintptr_t align) {
    return (reinterpret_cast<uintptr_t>(p) + uintptr_t(i * size)) % align == 0;
  };
  for (int64_t i = lo; i < hi && i < lo + 16; ++i) {
    bool ok = !out16 || at(out16, i, 2, 32);
    for (int k = 0; k < n32 && ok; ++k) ok = at(f32[k], i, 4, 64);
    if (ok) return i;
  }
  return hi;
}

// fn(lo, hi) over [0, n) in contiguous chunks of a multiple of `align` elements (64: whole cache
// lines of f32 state; 256: whole blocks of 8-bit state), one per task of run_host_tasks (the first
// on the calling thread). Element-wise (or block-wise) updates give the same bits for any thread
// count. A chunk has at least kMinChunk elements (a multiple of every align used): waking a worker
// costs about as much as updating a few thousand, so biases and norms stay on the calling thread.
inline constexpr int64_t kMinChunk = 16384;
template <class F> void for_chunks(int64_t n, int threads, F fn, int64_t align = 64) {
  const int64_t per = std::max(kMinChunk, ((n + threads - 1) / threads + align - 1) / align * align);
  const int tasks = int((n + per - 1) / per);  // at most `threads`
  run_host_tasks(tasks, [&](int i) { fn(int64_t(i) * per, std::min(n, int64_t(i + 1) * per)); });
}

}  // namespace lt::offload::simd
