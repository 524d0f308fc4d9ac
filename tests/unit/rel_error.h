// ||a - ref|| / max(||ref||, floor) over two value lists of one size, for tests that compare a
// backend or a fast path against a reference; a size mismatch or a non-finite value anywhere
// gives infinity, so the calling tolerance check fails.
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

namespace lt::test {

template <class V>
double rel_error(const std::vector<V>& a, const std::vector<V>& ref, double floor = 1e-12) {
  if (a.size() != ref.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(ref[i])) return INFINITY;
    const double d = double(a[i]) - double(ref[i]);
    num += d * d;
    den += double(ref[i]) * double(ref[i]);
  }
  return std::sqrt(num) / std::max(std::sqrt(den), floor);
}

}  // namespace lt::test
