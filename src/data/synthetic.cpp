#include "data/synthetic.h"

namespace lt {

namespace {

// splitmix64: a stateless hash, so any sample can be produced alone and in any thread.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

void SyntheticImages::get(int64_t i, void* input, int64_t* target) const {
  const uint64_t base = mix(seed_ ^ mix(uint64_t(i)));
  float* x = static_cast<float*>(input);
  const int64_t n = channels_ * size_ * size_;
  // One hash per value, cut into three 21-bit uniforms u (as (u + 1/2) / 2^21 in (0, 1)); their
  // sum, centred and doubled, has mean 0 and variance 1 (Irwin-Hall): close enough to N(0, 1)
  // for a benchmark input. 2 * (u1 + u2 + u3) + 3 < 2^24, so every step is exact in float.
  constexpr uint64_t m21 = (uint64_t(1) << 21) - 1;
  for (int64_t k = 0; k < n; ++k) {
    const uint64_t h = mix(base + uint64_t(k));
    const uint32_t s = uint32_t(h >> 43) + uint32_t((h >> 22) & m21) + uint32_t((h >> 1) & m21);
    x[k] = float(int32_t(2 * s + 3)) * 0x1p-21f - 3.0f;
  }
  *target = int64_t(mix(base ^ 0xc1a55ull) % uint64_t(classes_));
}

void SyntheticTokens::get(int64_t i, void* input, int64_t* target) const {
  const uint64_t base = mix(seed_ ^ mix(uint64_t(i) + 0x70c3ull));
  int64_t* x = static_cast<int64_t*>(input);
  int64_t prev = int64_t(mix(base) % uint64_t(vocab_));
  for (int64_t k = 0; k < seq_; ++k) {
    x[k] = prev;
    prev = int64_t(mix(base + uint64_t(k) + 1) % uint64_t(vocab_));
    target[k] = prev;
  }
}

void SyntheticSequences::get(int64_t i, void* input, int64_t* target) const {
  const uint64_t base = mix(seed_ ^ mix(uint64_t(i) + 0x5e9ull));
  int64_t* x = static_cast<int64_t*>(input);
  for (int64_t k = 0; k < seq_; ++k) {
    int64_t id = int64_t(mix(base + uint64_t(k)) % uint64_t(vocab_));
    if (id == pad_) id = (id + 1) % vocab_;  // vocab_ >= 2 (the task checks)
    x[k] = id;
  }
  *target = int64_t(mix(base ^ 0xc1a55ull) % uint64_t(classes_));
}

}  // namespace lt
