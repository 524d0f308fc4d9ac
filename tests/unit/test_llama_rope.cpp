// RoPE frequencies and rotation against transformers' formulas written out here in f64
// (modeling_rope_utils.py: _compute_default_rope_parameters, _compute_linear_scaling_rope_parameters,
// _compute_llama3_parameters; modeling_llama.py: apply_rotary_pos_emb with rotate_half).
#include <gtest/gtest.h>

#include <cmath>

#include "leantrain/ops.h"
#include "models/llama.h"

using namespace lt;

namespace {

std::vector<double> default_f64(int64_t dim, double theta) {
  std::vector<double> inv;
  for (int64_t i = 0; i < dim; i += 2) inv.push_back(1.0 / std::pow(theta, double(i) / double(dim)));
  return inv;
}

// Llama 3.1's smoothing: long wavelengths divided by factor, short ones kept, a linear blend between.
std::vector<double> llama3_f64(std::vector<double> inv, double factor, double low, double high, double orig) {
  const double low_wavelen = orig / low, high_wavelen = orig / high;
  for (double& f : inv) {
    const double wavelen = 2 * M_PI / f;
    if (wavelen < high_wavelen) continue;
    if (wavelen > low_wavelen) {
      f = f / factor;
      continue;
    }
    const double smooth = (orig / wavelen - low) / (high - low);
    f = (1 - smooth) * f / factor + smooth * f;
  }
  return inv;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want, double rtol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(double(got[i]), want[i], rtol * std::abs(want[i])) << "frequency " << i;
}

TEST(LlamaRope, DefaultFrequencies) {
  expect_close(rope_inv_freq(64, 10000.0), default_f64(64, 10000.0), 1e-6);
  expect_close(rope_inv_freq(128, 500000.0), default_f64(128, 500000.0), 2e-6);
  models::RopeScaling none;
  expect_close(models::rope_frequencies(80, 1e6, none), default_f64(80, 1e6), 2e-6);
  EXPECT_EQ(rope_inv_freq(8, 10000.0)[0], 1.0f);
}

TEST(LlamaRope, LinearScaling) {
  models::RopeScaling s{.type = "linear", .factor = 4.0};
  std::vector<double> want = default_f64(64, 10000.0);
  for (double& f : want) f /= 4.0;
  expect_close(models::rope_frequencies(64, 10000.0, s), want, 1e-6);
}

TEST(LlamaRope, Llama3Scaling) {
  // Llama 3.2 1B's: head dim 64... and 3.1 8B's head dim 128, each band of the smoothing reached.
  for (int64_t dim : {64, 128}) {
    models::RopeScaling s{"llama3", 32.0, 1.0, 4.0, 8192};
    const std::vector<double> want = llama3_f64(default_f64(dim, 500000.0), 32.0, 1.0, 4.0, 8192);
    const std::vector<float> got = models::rope_frequencies(dim, 500000.0, s);
    expect_close(got, want, 2e-6);
    int kept = 0, divided = 0, blended = 0;
    const std::vector<double> plain = default_f64(dim, 500000.0);
    for (size_t i = 0; i < plain.size(); ++i) {
      const double wavelen = 2 * M_PI / plain[i];
      kept += wavelen < 2048, divided += wavelen > 8192, blended += wavelen >= 2048 && wavelen <= 8192;
    }
    EXPECT_GT(kept, 0);
    EXPECT_GT(divided, 0);
    EXPECT_GT(blended, 0);
    EXPECT_EQ(got[0], rope_inv_freq(dim, 500000.0)[0]);  // the highest frequency is untouched
  }
  // Another shape of the blend: factor 8, low 2, high 8, original 1024.
  models::RopeScaling s{"llama3", 8.0, 2.0, 8.0, 1024};
  expect_close(models::rope_frequencies(96, 10000.0, s), llama3_f64(default_f64(96, 10000.0), 8.0, 2.0, 8.0, 1024), 2e-6);
}

// The op turns pair (i, i + D/2) of each rotated head by f32(inv_freq[i] * f32(position)), with
// transformers' rotate_half signs; heads past rotary_heads are untouched.
TEST(LlamaRope, PackedRotationIsRotateHalf) {
  const std::vector<float> inv = {1.0f, 0.3f, 0.01f, 2e-4f};  // head dim 8
  const int64_t B = 2, T = 5, N = 4, D = 8, rot = 3, offset = 1000;
  Generator gen(7);
  Tensor x = randn({B, T, N * D}, gen, 1.0f, DType::F64);
  const std::vector<double> xv = x.to_double_vector();
  const std::vector<double> y = rotary_embedding_packed(x, inv, rot, offset).to_double_vector();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < D / 2; ++i) {
          const size_t r = size_t(((b * T + t) * N + n) * D);
          const double x1 = xv[r + i], x2 = xv[r + i + D / 2];
          if (n >= rot) {
            EXPECT_EQ(y[r + i], x1);
            EXPECT_EQ(y[r + i + D / 2], x2);
            continue;
          }
          const float angle = inv[size_t(i)] * float(offset + t);
          const double c = double(float(std::cos(double(angle)))), s = double(float(std::sin(double(angle))));
          // q * cos + rotate_half(q) * sin, rotate_half(q) = [-q2, q1]
          EXPECT_NEAR(y[r + i], x1 * c - x2 * s, 1e-12);
          EXPECT_NEAR(y[r + i + D / 2], x2 * c + x1 * s, 1e-12);
        }
  // Its gradient is the inverse rotation: rotating back gives the input.
  Tensor xr = x.detach().set_requires_grad(true);
  Tensor yr = rotary_embedding_packed(xr, inv, rot, offset);
  yr.backward(yr.detach());
  const std::vector<double> back = xr.grad().to_double_vector();
  for (size_t i = 0; i < back.size(); ++i) EXPECT_NEAR(back[i], xv[i], 1e-6);
}

// End to end: the llama3 table of Llama 3.1 (head dim 128) applied at positions up to 300,
// against the exact rotation. The difference is transformers' own f32 rounding of the angle.
TEST(LlamaRope, Llama3RotationAtLongPositions) {
  models::RopeScaling s{"llama3", 8.0, 1.0, 4.0, 8192};
  const std::vector<float> table = models::rope_frequencies(128, 500000.0, s);
  const std::vector<double> exact = llama3_f64(default_f64(128, 500000.0), 8.0, 1.0, 4.0, 8192);
  const int64_t T = 300, D = 128;
  Generator gen(9);
  Tensor x = randn({1, T, 2 * D}, gen, 1.0f, DType::F64);  // one q head, one v head
  const std::vector<double> xv = x.to_double_vector(), y = rotary_embedding_packed(x, table, 1).to_double_vector();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < D / 2; ++i) {
      const size_t r = size_t(t * 2 * D);
      const double a = double(t) * exact[size_t(i)];
      const double want = xv[r + i] * std::cos(a) - xv[r + i + D / 2] * std::sin(a);
      EXPECT_NEAR(y[r + i], want, 2e-6 * double(t + 1)) << "t " << t << " i " << i;
    }
}

}  // namespace
