// NF4 quantisation as bitsandbytes stores it (backend/nf4.h, quant/nf4.h): codes of known values,
// the thresholds, packing order, all-zero and partial blocks, round-trip bounds, the nested 8-bit
// absmax and its offset, dtypes, the meta device, refusals, and CPU vs CUDA bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/nf4.h"
#include "error_of.h"
#include "leantrain/device.h"
#include "leantrain/ops.h"
#include "quant/bnb_dynamic_map.h"
#include "quant/nf4.h"

using namespace lt;
using lt::test::error_of;

namespace {

struct Plain {  // single-level NF4: codes and f32 absmax
  std::vector<uint8_t> codes;
  std::vector<float> absmax;
};

template <class T> std::vector<T> host(const Tensor& t) {
  const Tensor h = t.device().is_cpu() ? t : to_device(t, Device::cpu());
  return std::vector<T>(h.data<T>(), h.data<T>() + h.numel());
}

Plain quantize_plain(const std::vector<float>& x, DType dtype = DType::F32, Device dev = Device::cpu()) {
  const int64_t n = int64_t(x.size());
  const Tensor xt = from_vector(x, {n}, dtype, dev);
  const Tensor codes = empty({nf4_bytes(n)}, DType::U8, dev), absmax = empty({nf4_blocks(n)}, DType::F32, dev);
  backend_for(dev).nf4_quantize(codes, absmax, xt);
  return {host<uint8_t>(codes), host<float>(absmax)};
}

std::vector<float> dequantize_plain(const Plain& p, int64_t n) {
  const Tensor codes = from_ints(std::vector<int64_t>(p.codes.begin(), p.codes.end()), {int64_t(p.codes.size())},
                                 DType::U8);
  const Tensor absmax = from_vector(p.absmax, {int64_t(p.absmax.size())});
  const Tensor out = empty({n});
  backend_for(Device::cpu()).nf4_dequantize(out, codes, absmax);
  return host<float>(out);
}

int code_at(const std::vector<uint8_t>& codes, size_t i) { return i % 2 == 0 ? codes[i / 2] >> 4 : codes[i / 2] & 15; }

std::vector<float> normal(size_t n, uint64_t seed, float std = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, std);
  std::vector<float> x(n);
  for (float& v : x) v = d(rng);
  return x;
}

}  // namespace

TEST(QuantNf4, ThresholdsAreTheMidpointsOfTheCodeValues) {
  for (int k = 0; k < 15; ++k) {
    EXPECT_LT(nf4_value(k), nf4_value(k + 1));
    EXPECT_NEAR(nf4_threshold(k), (double(nf4_value(k)) + nf4_value(k + 1)) / 2, 1e-7) << k;
  }
  EXPECT_EQ(nf4_value(0), -1.0f);
  EXPECT_EQ(nf4_value(7), 0.0f);
  EXPECT_EQ(nf4_value(15), 1.0f);
}

TEST(QuantNf4, CodeValuesTimesAbsmaxGiveTheirCodes) {
  // Every code value, scaled by 2.5 (absmax 2.5 since -1 and 1 are among them), in code order:
  // bytes 0x01, 0x23, ..., 0xEF.
  std::vector<float> x;
  for (int k = 0; k < 16; ++k) x.push_back(nf4_value(k) * 2.5f);
  const Plain p = quantize_plain(x);
  ASSERT_EQ(p.absmax, std::vector<float>{2.5f});
  ASSERT_EQ(p.codes.size(), 8u);
  for (int j = 0; j < 8; ++j) EXPECT_EQ(p.codes[size_t(j)], uint8_t((2 * j) << 4 | (2 * j + 1))) << j;
  const std::vector<float> back = dequantize_plain(p, 16);
  for (int k = 0; k < 16; ++k) EXPECT_EQ(back[size_t(k)], nf4_value(k) * 2.5f) << k;
}

TEST(QuantNf4, AValueAtAThresholdTakesTheLowerCode) {
  // absmax 1 (the block holds 1.0), so the normalised values are the values themselves.
  for (int k = 0; k < 15; ++k) {
    const float t = nf4_threshold(k);
    const std::vector<float> x = {t, std::nextafter(t, 2.0f), std::nextafter(t, -2.0f), 1.0f};
    const Plain p = quantize_plain(x);
    EXPECT_EQ(code_at(p.codes, 0), k) << "at threshold " << k;
    EXPECT_EQ(code_at(p.codes, 1), k + 1) << "just above threshold " << k;
    EXPECT_EQ(code_at(p.codes, 2), k) << "just below threshold " << k;
  }
  EXPECT_EQ(nf4_code(std::nanf("")), 0);
}

TEST(QuantNf4, FirstElementGoesInTheHighNibble) {
  const Plain p = quantize_plain({1.0f, -1.0f, 0.0f, 1.0f});
  EXPECT_EQ(p.codes, (std::vector<uint8_t>{0xF0, 0x7F}));
}

TEST(QuantNf4, AllZeroBlockPacksToZeroBytes) {
  std::vector<float> x(64 * 3, 0.0f);
  for (int i = 128; i < 192; ++i) x[size_t(i)] = 0.01f * float(i - 150);  // the third block is not zero
  const Plain p = quantize_plain(x);
  EXPECT_EQ(p.absmax[0], 0.0f);
  EXPECT_EQ(p.absmax[1], 0.0f);
  for (int j = 0; j < 64; ++j) EXPECT_EQ(p.codes[size_t(j)], 0x00) << j;
  const std::vector<float> back = dequantize_plain(p, int64_t(x.size()));
  for (int i = 0; i < 128; ++i) EXPECT_EQ(back[size_t(i)], 0.0f);
  // Zero values in a non-zero block take code 7 (the value 0), not 0.
  EXPECT_EQ(code_at(p.codes, 150), 7);
}

TEST(QuantNf4, OddLengthPadsTheLastLowNibble) {
  // 64 + 5 elements: the partial block's pad is a quantised zero, code 7 ...
  std::vector<float> x = normal(69, 1);
  Plain p = quantize_plain(x);
  ASSERT_EQ(p.codes.size(), 35u);
  ASSERT_EQ(p.absmax.size(), 2u);
  EXPECT_EQ(p.codes[34] & 15, 7);
  float amax = 0;
  for (int i = 64; i < 69; ++i) amax = std::max(amax, std::fabs(x[size_t(i)]));
  EXPECT_EQ(p.absmax[1], amax);
  // ... and code 0 when that partial block is all zero (0 * inf is NaN).
  for (int i = 64; i < 69; ++i) x[size_t(i)] = 0.0f;
  p = quantize_plain(x);
  EXPECT_EQ(p.codes[34], 0x00);
  EXPECT_EQ(quantize_plain({0.5f}).codes, std::vector<uint8_t>{0xF7});
}

TEST(QuantNf4, RoundTripErrorIsAtMostHalfTheWidestGap) {
  double half_gap = 0;
  for (int k = 0; k < 15; ++k) half_gap = std::max(half_gap, (double(nf4_value(k + 1)) - nf4_value(k)) / 2);
  const std::vector<float> x = normal(64 * 40 + 33, 2, 0.02f);
  const Plain p = quantize_plain(x);
  const std::vector<float> back = dequantize_plain(p, int64_t(x.size()));
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(double(back[i]) - x[i]) / p.absmax[i / 64]);
  EXPECT_LE(worst, half_gap * (1 + 1e-6));
  EXPECT_GT(worst, half_gap / 4);  // the bound is not vacuous: normal data reaches the wide outer gaps
}

TEST(QuantNf4, Bf16InputQuantisesAsItsF32Values) {
  std::vector<float> x = normal(300, 3);
  for (float& v : x) v = bf16_to_float(float_to_bf16(v));
  const Plain a = quantize_plain(x, DType::F32), b = quantize_plain(x, DType::BF16);
  EXPECT_EQ(a.codes, b.codes);
  EXPECT_EQ(a.absmax, b.absmax);
}

TEST(QuantNf4, BnbDynamicMapShape) {
  const std::span<const float> m = bnb_dynamic_map_signed();
  ASSERT_EQ(m.size(), 256u);
  for (size_t i = 1; i < 256; ++i) EXPECT_LT(m[i - 1], m[i]) << i;
  EXPECT_EQ(m[127], 0.0f);
  EXPECT_EQ(m[255], 1.0f);
  for (size_t i = 0; i < 127; ++i) EXPECT_EQ(m[i], -m[254 - i]) << i;
  // Smallest magnitude: decade 1e-6, linspace(0.1, 1, 2) = {0.1, 1}, mean 0.55, in f32.
  EXPECT_EQ(m[128], float(1e-6) * 0.55f);
  // Largest below 1: decade 1, 65 boundaries, the mean of the last two, in f32.
  const float step = (1.0f - 0.1f) / 64.0f;
  EXPECT_EQ(m[254], ((1.0f - step) + 1.0f) / 2.0f);
}

TEST(QuantNf4, BnbCodeSearchPicksANearestEntry) {
  const std::span<const float> m = bnb_dynamic_map_signed();
  std::mt19937_64 rng(4);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int t = 0; t < 20000; ++t) {
    const float x = t < 256 ? m[size_t(t)] : u(rng);
    const int c = q8_bnb_code(m.data(), x);
    for (size_t j = 0; j < 256; ++j)
      ASSERT_LE(std::abs(double(m[size_t(c)]) - x), std::abs(double(m[j]) - x)) << "x " << x << " code " << c;
    if (t < 256) EXPECT_EQ(c, t);
  }
}

TEST(QuantNf4, BnbCodeSearchTieKeepsTheFinalPivot) {
  // A map of 0, 1, ..., 255: halfway between two entries, bitsandbytes' search keeps the entry
  // it probed last. For 200.5 the probes are 127, 191, 223, 207, 199, 203, 201, 200 (last: 200,
  // below x, so the tie goes down); for 201.5 they end on 202 (above x: the tie goes up).
  std::vector<float> iota(256);
  for (int i = 0; i < 256; ++i) iota[size_t(i)] = float(i);
  EXPECT_EQ(q8_bnb_code(iota.data(), 200.5f), 200);
  EXPECT_EQ(q8_bnb_code(iota.data(), 201.5f), 202);
  EXPECT_EQ(q8_bnb_code(iota.data(), 200.25f), 200);
  EXPECT_EQ(q8_bnb_code(iota.data(), 201.75f), 202);
  EXPECT_EQ(q8_bnb_code(iota.data(), 1000.0f), 255);
  EXPECT_EQ(q8_bnb_code(iota.data(), -5.0f), 0);
}

TEST(QuantNf4, DoubleQuantOffsetAndNestedAbsmax) {
  const std::vector<float> x = normal(64 * 600 + 10, 5, 0.05f);  // 601 blocks: 3 nested blocks
  const Tensor w = from_vector(x, {int64_t(x.size())});
  const Nf4Weight q = nf4_quantize(w);
  const Plain p = quantize_plain(x);
  ASSERT_EQ(p.absmax.size(), 601u);
  double sum = 0;
  for (float a : p.absmax) sum += a;
  EXPECT_EQ(q.offset, float(sum / 601));
  EXPECT_EQ(host<uint8_t>(q.codes), p.codes);  // the 4-bit codes do not depend on the nesting
  const std::vector<float> nested = host<float>(q.nested_absmax);
  ASSERT_EQ(nested.size(), 3u);
  for (size_t b = 0; b < 3; ++b) {
    float amax = 0;
    for (size_t i = b * 256; i < std::min<size_t>(601, b * 256 + 256); ++i)
      amax = std::max(amax, std::fabs(p.absmax[i] - q.offset));
    EXPECT_EQ(nested[b], amax) << b;
  }
  // The dequantised absmax is within half the widest step of the map (0.9/64 in [0.1, 1]).
  const std::vector<float> back = host<float>(nf4_block_absmax(q));
  for (size_t i = 0; i < 601; ++i)
    EXPECT_LE(std::abs(double(back[i]) - p.absmax[i]), nested[i / 256] * (0.9 / 128) * 1.001 + 1e-9) << i;
  const std::vector<uint8_t> acodes = host<uint8_t>(q.absmax_codes);
  const volatile float scaled = bnb_dynamic_map_signed()[acodes[7]] * nested[0];  // volatile: no FMA
  EXPECT_EQ(back[7], scaled + q.offset);
}

TEST(QuantNf4, DequantiseToEachDtype) {
  const std::vector<float> x = normal(64 * 5 + 1, 6);
  const Nf4Weight q = nf4_quantize(from_vector(x, {int64_t(x.size())}, DType::BF16));
  const std::vector<float> f = host<float>(nf4_dequantize(q, DType::F32));
  const std::vector<float> b = host<float>(cast(nf4_dequantize(q, DType::BF16), DType::F32));
  ASSERT_EQ(f.size(), x.size());
  for (size_t i = 0; i < f.size(); ++i) EXPECT_EQ(b[i], bf16_to_float(float_to_bf16(f[i]))) << i;
  EXPECT_EQ(nf4_dequantize(q, DType::F16).dtype(), DType::F16);
}

TEST(QuantNf4, KeepsTheWeightShape) {
  const Nf4Weight q = nf4_quantize(from_vector(normal(12 * 40, 7), {12, 40}));
  EXPECT_EQ(q.shape, (Shape{12, 40}));
  EXPECT_EQ(q.codes.numel(), 240);
  EXPECT_EQ(q.absmax_codes.numel(), 8);
  EXPECT_EQ(nf4_dequantize(q, DType::F32).shape(), (Shape{12, 40}));
}

TEST(QuantNf4, MetaDeviceAllocatesTheState) {
  const Nf4Weight q = nf4_quantize(empty({4096, 1000}, DType::BF16, Device::meta()));
  EXPECT_EQ(q.codes.numel(), 4096 * 500);
  EXPECT_EQ(q.absmax_codes.numel(), 4096 * 1000 / 64);
  EXPECT_EQ(q.nested_absmax.numel(), (4096 * 1000 / 64 + 255) / 256);
  EXPECT_EQ(nf4_dequantize(q, DType::BF16).shape(), (Shape{4096, 1000}));
}

TEST(QuantNf4, RefusesBadBuffersAndDtypes) {
  const Tensor x = zeros({100});
  const Tensor small = empty({10}, DType::U8), absmax = empty({2});
  EXPECT_NE(error_of([&] { backend_for(Device::cpu()).nf4_quantize(small, absmax, x); }).find("codes"),
            std::string::npos);
  EXPECT_NE(error_of([&] { nf4_quantize(zeros({10}, DType::I64)); }).find("NF4 quantises"), std::string::npos);
  EXPECT_NE(error_of([&] { nf4_quantize(zeros({10}, DType::F64)); }).find("NF4 quantises"), std::string::npos);
}

TEST(QuantNf4, CudaMatchesCpuBitForBit) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  for (int64_t n : {int64_t(1), int64_t(63), int64_t(64), int64_t(65), int64_t(1001), int64_t(64 * 256 * 3 + 17)}) {
    std::vector<float> x = normal(size_t(n), uint64_t(n), 0.03f);
    for (int64_t i = 0; i < std::min<int64_t>(n, 64); ++i) x[size_t(i)] = 0.0f;  // an all-zero block
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
      const Nf4Weight c = nf4_quantize(from_vector(x, {n}, dt));
      const Nf4Weight g = nf4_quantize(from_vector(x, {n}, dt, Device::cuda()));
      EXPECT_EQ(host<uint8_t>(c.codes), host<uint8_t>(g.codes)) << n;
      EXPECT_EQ(host<uint8_t>(c.absmax_codes), host<uint8_t>(g.absmax_codes)) << n;
      EXPECT_EQ(host<float>(c.nested_absmax), host<float>(g.nested_absmax)) << n;
      EXPECT_EQ(c.offset, g.offset) << n;
      EXPECT_EQ(host<float>(cast(nf4_dequantize(c, dt), DType::F32)),
                host<float>(cast(nf4_dequantize(g, dt), DType::F32)))
          << n;
    }
  }
}

TEST(QuantNf4, DoubleQuantKnownVector) {
  // Two blocks with absmax 1 and 3: offset 2, absmax - offset = {-1, 1}, nested absmax 1; -1 is
  // nearest the map's most negative entry (code 0, there is no -1.0), 1 is code 255 (1.0).
  std::vector<float> x(128, 0.25f);
  x[5] = -1.0f;
  x[64 + 9] = 3.0f;
  const Nf4Weight q = nf4_quantize(from_vector(x, {128}));
  EXPECT_EQ(q.offset, 2.0f);
  EXPECT_EQ(host<float>(q.nested_absmax), std::vector<float>{1.0f});
  EXPECT_EQ(host<uint8_t>(q.absmax_codes), (std::vector<uint8_t>{0, 255}));
  const std::vector<float> a = host<float>(nf4_block_absmax(q));
  EXPECT_EQ(a[0], bnb_dynamic_map_signed()[0] + 2.0f);
  EXPECT_EQ(a[1], 3.0f);
  // The first block's -1.0 comes back as its code value (-1) times the dequantised absmax.
  EXPECT_EQ(host<float>(nf4_dequantize(q, DType::F32))[5], -a[0]);
}
