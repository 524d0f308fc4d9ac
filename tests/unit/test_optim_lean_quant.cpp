// The 8-bit dynamic maps and the nearest-code search the kernels share: shape of each map,
// nearest code against a brute-force scan, and the block-wise round-trip error bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "backend/quant8.h"
#include "optim/quant_map.h"

using namespace lt;

namespace {

std::vector<float> map_of(bool is_signed) {
  const float* m = is_signed ? dynamic_map_signed() : dynamic_map_unsigned();
  return std::vector<float>(m, m + kQuantCodes);
}

int brute_nearest(const std::vector<float>& map, float x) {
  int best = 0;
  for (int i = 1; i < kQuantCodes; ++i)
    if (std::abs(double(map[size_t(i)]) - x) <= std::abs(double(map[size_t(best)]) - x)) best = i;
  return best;
}

// The worst error of a normalised value in [-1, 1] ([0, 1] unsigned): half the widest gap between
// neighbouring codes, or the distance from an end of the range to the nearest code.
double worst_error(const std::vector<float>& map, bool is_signed) {
  double g = std::max(1.0 - map.back(), double(map.front()) - (is_signed ? -1.0 : 0.0));
  for (size_t i = 1; i < map.size(); ++i) g = std::max(g, (double(map[i]) - map[i - 1]) / 2);
  return g;
}

// Quantises x block by block as the kernels do, then dequantises; returns the largest
// |x - x'| / absmax of its block.
double round_trip_error(const std::vector<float>& x, const float* map) {
  double worst = 0;
  for (size_t b = 0; b < x.size(); b += size_t(kQuantBlock)) {
    const size_t e = std::min(x.size(), b + size_t(kQuantBlock));
    float amax = 0;
    for (size_t i = b; i < e; ++i) amax = std::max(amax, std::fabs(x[i]));
    for (size_t i = b; i < e; ++i) {
      const float back = map[quantize_nearest(map, quant_normalise(x[i], amax))] * amax;
      worst = std::max(worst, std::abs(double(back) - x[i]) / amax);
    }
  }
  return worst;
}

// Values with magnitudes spread over `decades` orders (log-uniform), signed or not.
std::vector<float> spread(size_t n, double decades, bool is_signed, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<float> x(n);
  for (float& v : x) v = float(std::pow(10.0, -decades * u(rng)) * (is_signed && u(rng) < 0.5 ? -1 : 1));
  return x;
}

}  // namespace

TEST(Quant8, SignedMapShape) {
  auto m = map_of(true);
  EXPECT_TRUE(std::is_sorted(m.begin(), m.end()));
  EXPECT_TRUE(std::adjacent_find(m.begin(), m.end()) == m.end()) << "duplicate codes";
  EXPECT_EQ(m.back(), 1.0f);
  EXPECT_EQ(std::count(m.begin(), m.end(), 0.0f), 1);
  EXPECT_EQ(std::count_if(m.begin(), m.end(), [](float v) { return v < 0; }), 127);
  EXPECT_NEAR(m.front(), -(1 - 0.9 / 128), 1e-6);  // no -1: bitsandbytes' layout
  // Seven decades: the smallest magnitude is 10^-6 * 0.55.
  float smallest = 1;
  for (float v : m)
    if (v != 0) smallest = std::min(smallest, std::fabs(v));
  EXPECT_NEAR(smallest, 5.5e-7, 1e-12);
}

TEST(Quant8, UnsignedMapShape) {
  auto m = map_of(false);
  EXPECT_TRUE(std::is_sorted(m.begin(), m.end()));
  EXPECT_TRUE(std::adjacent_find(m.begin(), m.end()) == m.end()) << "duplicate codes";
  EXPECT_EQ(m.front(), 0.0f);
  EXPECT_EQ(m.back(), 1.0f);
  EXPECT_NEAR(m[1], 3.25e-7, 1e-12);
  // 128 codes in the top decade [0.1, 1], twice the signed map's 64 per sign.
  EXPECT_EQ(std::count_if(m.begin(), m.end(), [](float v) { return v >= 0.1f; }), 129);
}

TEST(Quant8, NearestCodeMatchesBruteForce) {
  for (bool s : {true, false}) {
    auto m = map_of(s);
    for (int i = 0; i < kQuantCodes; ++i) EXPECT_EQ(quantize_nearest(m.data(), m[size_t(i)]), i) << "code " << i;
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<float> u(s ? -1.05f : -0.05f, 1.05f);
    for (int t = 0; t < 20000; ++t) {
      const float x = t % 2 ? u(rng) : spread(1, 7, s, uint64_t(t))[0];
      ASSERT_EQ(quantize_nearest(m.data(), x), brute_nearest(m, x)) << "x = " << x;
    }
    // Out of range clamps to the ends; NaN takes code 0; an all-zero block decodes to zero.
    EXPECT_EQ(quantize_nearest(m.data(), 2.0f), kQuantCodes - 1);
    EXPECT_EQ(quantize_nearest(m.data(), -2.0f), 0);
    EXPECT_EQ(quantize_nearest(m.data(), std::nanf("")), 0);
    EXPECT_EQ(quant_normalise(0.0f, 0.0f), 0.0f);
  }
}

// Block-wise round trip: the error, relative to the block's absmax, is at most 0.9/128 (signed:
// half the top decade's step, and the gap from -1 to the most negative code) and 0.9/256
// (unsigned), plus the f32 rounding of map[code] * absmax.
TEST(Quant8, RoundTripErrorBound) {
  const double signed_bound = worst_error(map_of(true), true), unsigned_bound = worst_error(map_of(false), false);
  EXPECT_NEAR(signed_bound, 0.9 / 128, 1e-6);
  EXPECT_NEAR(unsigned_bound, 0.9 / 256, 1e-6);
  for (uint64_t seed : {1u, 2u, 3u}) {
    // 10 blocks plus a 77-element tail; magnitudes over 1, 3 and 7 decades.
    for (double decades : {1.0, 3.0, 7.0}) {
      const double es = round_trip_error(spread(2637, decades, true, seed), dynamic_map_signed());
      const double eu = round_trip_error(spread(2637, decades, false, seed), dynamic_map_unsigned());
      EXPECT_LE(es, signed_bound + 1e-7) << decades << " decades";
      EXPECT_LE(eu, unsigned_bound + 1e-7) << decades << " decades";
      EXPECT_GT(es, 0.5 * signed_bound);  // the bound is tight, not vacuous
      EXPECT_GT(eu, 0.5 * unsigned_bound);
    }
  }
  // Small values keep some relative precision where an 8-bit linear map (step 1/127) would round
  // them to 0: 1e-4 of absmax comes back as 0.8875e-4 (4 codes in [1e-5, 1e-4], 8 in [1e-4, 1e-3]).
  const float* m = dynamic_map_signed();
  const float back = m[quantize_nearest(m, 1e-4f)];
  EXPECT_NEAR(back, 0.8875e-4, 1e-9);
  EXPECT_GT(back, 0);
}
