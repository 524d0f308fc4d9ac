// The largest elementwise |a - b| of two tensors of one size (any dtype, any device), for tests
// that compare against a reference; a size mismatch fails the calling test.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "leantrain/tensor.h"

namespace lt::test {

inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  const auto x = a.to_double_vector(), y = b.to_double_vector();
  EXPECT_EQ(x.size(), y.size());
  double m = 0;
  for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

}  // namespace lt::test
