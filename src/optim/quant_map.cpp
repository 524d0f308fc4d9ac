// Dynamic (non-linear) 8-bit maps, after Dettmers' dynamic tree quantisation as bitsandbytes
// lays it out: a value's magnitude is a decade (how many leading zeros after the point) plus a
// linear fraction, so codes are spread over seven decades, 1e-7 .. 1, instead of evenly over
// [-1, 1]: optimizer moments span many orders of magnitude inside one block.
//
// Decade d = 0..6 covers [0.1, 1] * 10^(d-6) and holds the midpoints of an even split of that
// range into 2^d parts (signed map, mirrored for negatives) or 2^(d+1) parts (unsigned map, no
// sign to spend a bit on): larger decades get finer steps. With 0 and 1.0 added that is
// 2*127 + 2 = 256 signed codes (smallest magnitude 5.5e-7, largest step 0.9/64 in [0.1, 1])
// and 254 + 2 = 256 unsigned codes (smallest 3.25e-7, largest step 0.9/128). There is no -1.0:
// a block's most negative value comes back at most 0.9/128 of its absmax smaller in magnitude.
// Computed in double, rounded once to f32 and sorted, so the maps are identical on every run.
#include "optim/quant_map.h"

#include <algorithm>
#include <array>
#include <vector>

#include "backend/quant8.h"
#include "leantrain/error.h"

namespace lt {

namespace {

std::array<float, kQuantCodes> build_map(bool is_signed) {
  static constexpr double kDecade[7] = {1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0};
  std::vector<double> v{0.0, 1.0};
  for (int d = 0; d < 7; ++d) {
    const int parts = is_signed ? (1 << d) : (2 << d);
    for (int j = 0; j < parts; ++j) {
      const double x = kDecade[d] * (0.1 + 0.9 * (j + 0.5) / parts);
      v.push_back(x);
      if (is_signed) v.push_back(-x);
    }
  }
  LT_ASSERT(v.size() == size_t(kQuantCodes));
  std::sort(v.begin(), v.end());
  std::array<float, kQuantCodes> out;
  for (int i = 0; i < kQuantCodes; ++i) out[size_t(i)] = float(v[size_t(i)]);
  return out;
}

}  // namespace

const float* dynamic_map_signed() {
  static const std::array<float, kQuantCodes> map = build_map(true);
  return map.data();
}

const float* dynamic_map_unsigned() {
  static const std::array<float, kQuantCodes> map = build_map(false);
  return map.data();
}

}  // namespace lt
