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

double unit(uint64_t h) { return double(h >> 11) * (1.0 / 9007199254740992.0); }

}  // namespace

void SyntheticImages::get(int64_t i, void* input, int64_t* target) const {
  const uint64_t base = mix(seed_ ^ mix(uint64_t(i)));
  float* x = static_cast<float*>(input);
  const int64_t n = channels_ * size_ * size_;
  // Sum of three uniforms, centred and scaled: close enough to N(0, 1) for a benchmark input.
  for (int64_t k = 0; k < n; ++k) {
    uint64_t h = mix(base + uint64_t(k));
    double s = unit(h) + unit(mix(h)) + unit(mix(h + 1)) - 1.5;
    x[k] = float(s * 2.0);
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

}  // namespace lt
