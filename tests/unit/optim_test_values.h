// Deterministic test values for optimizer tests: n values of varied sign and of magnitudes over
// three decades (10^0 .. 10^-3), different for each (seed, t), so that updates span many
// exponents and rounding modes are exercised. Shared by the lean-optimizer and stochastic-rounding
// backend tests.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

namespace optim_test {

inline std::vector<float> values(int64_t n, int seed, int t) {
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) {
    const double frac = std::fmod(0.618034 * double(i) + 0.1 * t + 0.3 * seed, 1.0);
    v[i] = float(std::sin(0.37 * double(i) + 1.3 * t + seed) * std::pow(10.0, -3 * frac));
  }
  return v;
}

}  // namespace optim_test
