// Counter-based random numbers: value i of stream (seed, offset) is a pure function of
// (seed, offset + i), identical on CPU and GPU, so dropout can be regenerated in backward
// (no mask is stored) and recomputation under checkpointing draws the same numbers.
#pragma once
#include <cmath>
#include <cstdint>

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

}  // namespace lt
