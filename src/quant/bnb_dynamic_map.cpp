// The map is built the way bitsandbytes' create_dynamic_map(signed=True, max_exponent_bits=7,
// total_bits=8) builds it, rounding to f32 where its torch tensors do: for decade i = 0..6, an
// f32 linspace(0.1, 1, 2^i + 1), the f32 means of neighbouring boundaries, each times the
// python float 10^(i-6) (a CPU scalar, applied in f32), with a negated copy; then 0 and 1, sorted.
// That is 2 * 127 + 2 = 256 values. optim/quant_map.cpp's optimizer map is the same idea computed
// in double and rounded once, so a few entries may differ from this one in the last bit; this map
// must match bitsandbytes' bits because its codes are stored in checkpoints.
//
// torch's f32 linspace computes entry k as start + step * k in the first half and
// end - step * (steps - 1 - k) in the second, with step = (end - start) / (steps - 1) in f32.
// bench/peers/nf4_reference.py writes the map torch produces; the GPU comparison checks this one
// against it entry by entry.
#include "quant/bnb_dynamic_map.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "leantrain/error.h"

#pragma GCC optimize("fp-contract=off")

namespace lt {

namespace {

std::vector<float> f32_linspace(float start, float end, int steps) {
  const float step = (end - start) / float(steps - 1);
  std::vector<float> v(static_cast<size_t>(steps));
  for (int k = 0; k < steps; ++k)
    v[size_t(k)] = k < steps / 2 ? start + step * float(k) : end - step * float(steps - 1 - k);
  return v;
}

std::array<float, 256> build() {
  std::vector<float> data;
  for (int i = 0; i < 7; ++i) {
    const std::vector<float> bounds = f32_linspace(0.1f, 1.0f, (1 << i) + 1);
    const float scale = float(std::pow(10.0, double(i - 6)));
    for (size_t k = 0; k + 1 < bounds.size(); ++k) {
      const float mean = (bounds[k] + bounds[k + 1]) / 2.0f;
      data.push_back(scale * mean);
    }
    for (size_t k = 0; k + 1 < bounds.size(); ++k) {
      const float mean = (bounds[k] + bounds[k + 1]) / 2.0f;
      data.push_back(-scale * mean);
    }
  }
  data.push_back(0.0f);
  data.push_back(1.0f);
  LT_ASSERT(data.size() == 256);
  std::sort(data.begin(), data.end());
  std::array<float, 256> out;
  std::copy(data.begin(), data.end(), out.begin());
  return out;
}

}  // namespace

std::span<const float> bnb_dynamic_map_signed() {
  static const std::array<float, 256> map = build();
  return map;
}

}  // namespace lt
