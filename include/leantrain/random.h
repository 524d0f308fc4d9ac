// Counter-based random numbers: value i of stream (seed, offset) is a pure function of
// (seed, offset + i), identical on CPU and GPU, so dropout can be regenerated in backward
// (no mask is stored) and recomputation under checkpointing draws the same numbers.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#if defined(__CUDACC__)
#define LT_HD __host__ __device__ __forceinline__
#else
#define LT_HD inline
#endif

namespace lt {

LT_HD uint64_t rng_mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
// Uniform in [0, 1) with 24 random bits.
LT_HD float rng_uniform(uint64_t seed, uint64_t counter) {
  uint64_t r = rng_mix64(seed ^ rng_mix64(counter));
  return float(r >> 40) * (1.0f / 16777216.0f);
}
// Standard normal by Box-Muller over two counters.
LT_HD float rng_normal(uint64_t seed, uint64_t counter) {
  float u1 = rng_uniform(seed, 2 * counter);
  float u2 = rng_uniform(seed, 2 * counter + 1);
  u1 = u1 < 1e-7f ? 1e-7f : u1;
  return sqrtf(-2.0f * logf(u1)) * cosf(6.283185307179586f * u2);
}

// ---- stochastic rounding (optimizer write-back of 16-bit parameters) ----
// The stream of one parameter in one optimizer step: element i of it draws rng_bits32(stream, i).
// Keyed on (seed, step, parameter index), so CPU and GPU draw the same bits and a resumed run
// (the step count is in the checkpoint) draws what the uninterrupted run would have.
LT_HD uint64_t sr_stream(uint64_t seed, uint64_t step, uint64_t param_index) {
  return rng_mix64(seed ^ rng_mix64(0x5352000000000000ull ^ rng_mix64(step) ^ (param_index * 0x9e3779b97f4a7c15ull)));
}
LT_HD uint32_t rng_bits32(uint64_t stream, uint64_t counter) {
  return uint32_t(rng_mix64(stream ^ rng_mix64(counter)) >> 32);
}
LT_HD uint32_t sr_float_bits(float x) {
  union { float f; uint32_t u; } c{x};
  return c.u;
}
LT_HD float sr_bits_float(uint32_t u) {
  union { uint32_t u; float f; } c{u};
  return c.f;
}
// x rounded to bf16 stochastically, returned as the f32 holding that bf16 value (so any
// round-to-nearest store of it is exact): the low 16 random bits are added below bf16's mantissa
// and the sum truncated, so x goes up with probability (distance to the lower neighbour) / ulp.
// inf and NaN come back unchanged; a carry past the largest finite bf16 gives inf.
LT_HD float sr_round_bf16(float x, uint32_t r) {
  const uint32_t u = sr_float_bits(x);
  if ((u & 0x7f800000u) == 0x7f800000u) return x;
  return sr_bits_float((u + (r & 0xffffu)) & 0xffff0000u);
}
// The same for f16 (10 mantissa bits, normals from 2^-14, subnormal spacing 2^-24): with ulp the
// f16 spacing at |x|, m = |x| / ulp (exact, a power-of-two scale), the result is floor(m) or
// floor(m) + 1 ulps, up with probability frac(m) from 24 random bits. |x| >= 65504 (the largest
// f16), inf and NaN come back unchanged for the store's round to nearest.
LT_HD float sr_round_f16(float x, uint32_t r) {
  const uint32_t u = sr_float_bits(x);
  const float ax = sr_bits_float(u & 0x7fffffffu);
  if (!(ax < 65504.0f)) return x;
  int e = int((u >> 23) & 0xffu) - 127;  // floor(log2 |x|) for normal f32; f32 subnormals clamp below
  if (e < -14) e = -14;
  const float ulp = sr_bits_float(uint32_t(e - 10 + 127) << 23);
  const float inv = sr_bits_float(uint32_t(10 - e + 127) << 23);
  const float m = ax * inv;
  const float q = floorf(m);
  const float frac = m - q;
  // Up when k < frac * 2^24 for k uniform in [0, 2^24): exact for every frac with <= 24 bits,
  // i.e. every |x| >= 2^-38 (normal f16 range: 13 bits); below, at most 2^-24 ulp towards zero.
  const float up = float(r >> 8) + 1.0f <= frac * 16777216.0f ? 1.0f : 0.0f;
  const float mag = (q + up) * ulp;
  return (u & 0x80000000u) ? -mag : mag;
}

struct Generator {
  uint64_t seed = 0;
  uint64_t offset = 0;
  explicit Generator(uint64_t s = 0) : seed(s) {}
  // Reserves n counters and returns the first.
  uint64_t take(uint64_t n) {
    uint64_t o = offset;
    offset += n;
    return o;
  }
};

// Offsets of several generators, and putting them back: what a recomputation (checkpointing,
// the fused step's norm pass) rewinds so that dropout draws the same masks again.
inline std::vector<uint64_t> generator_offsets(const std::vector<Generator*>& gens) {
  std::vector<uint64_t> out;
  out.reserve(gens.size());
  for (const Generator* g : gens) out.push_back(g->offset);
  return out;
}
inline void set_generator_offsets(const std::vector<Generator*>& gens, const std::vector<uint64_t>& offsets) {
  for (size_t i = 0; i < gens.size(); ++i) gens[i]->offset = offsets[i];
}

}  // namespace lt
