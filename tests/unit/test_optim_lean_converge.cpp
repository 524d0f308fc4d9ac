// 8-bit states converge like 32-bit ones on a real task: an MLP (784-64-64-10) on 4096
// Fashion-MNIST images, the same init and batches for each optimizer. Two of its four weight
// matrices (50176 and 4096 elements) are quantised; the 640-element head and biases keep f32.
// The 8-bit run's final loss must land within a tolerance of the 32-bit run's that is tighter
// than what halving the learning rate does to the 32-bit run, so the test can tell them apart.
#include <filesystem>
#include <gtest/gtest.h>

#include <cmath>

#include "leantrain/autograd.h"
#include "leantrain/data.h"
#include "leantrain/ops.h"
#include "leantrain/optim_lean.h"
#include "leantrain/random.h"

using namespace lt;

namespace {

constexpr int64_t kImages = 4096, kBatch = 128, kSteps = 150, kTail = 30;
// Measured: |8-bit - 32-bit| 0.005 (AdamW) and 0.002 (Lion); halving lr moves 32-bit by 0.029 and 0.12.
constexpr double kTolerance = 0.015;

struct Batches {
  std::vector<Tensor> x, y;
};

const Batches& batches() {
  static const Batches b = [] {
    ImageSet set = load_fashion_mnist(Split::Test);
    Batches out;
    const int64_t px = set.rows * set.cols;
    for (int64_t first = 0; first + kBatch <= kImages; first += kBatch) {
      std::vector<float> x(size_t(kBatch * px));
      std::vector<int64_t> y(static_cast<size_t>(kBatch));
      for (int64_t i = 0; i < kBatch; ++i) {
        for (int64_t j = 0; j < px; ++j)
          x[size_t(i * px + j)] =
              (float(set.pixels[size_t((first + i) * px + j)]) / 255.f - kFashionMnistMean) / kFashionMnistStd;
        y[size_t(i)] = set.labels[size_t(first + i)];
      }
      out.x.push_back(from_vector(x, {kBatch, px}));
      out.y.push_back(from_ints(y, {kBatch}));
    }
    return out;
  }();
  return b;
}

// Mean training loss over the last kTail steps.
double train(const OptimizerConfig& c) {
  Generator gen(1234);
  auto layer = [&](const std::string& name, int64_t in, int64_t out, std::vector<NamedTensor>& ps) {
    ps.push_back({name + ".weight", randn({out, in}, gen, float(1 / std::sqrt(double(in)))).set_requires_grad(true)});
    ps.push_back({name + ".bias", zeros({out}).set_requires_grad(true)});
  };
  std::vector<NamedTensor> ps;
  layer("fc1", 784, 64, ps);
  layer("fc2", 64, 64, ps);
  layer("fc3", 64, 10, ps);
  auto opt = make_optimizer(c, decay_groups(ps));
  const Batches& data = batches();
  double tail = 0;
  for (int64_t t = 0; t < kSteps; ++t) {
    const size_t b = size_t(t) % data.x.size();
    Tensor h = relu(linear(data.x[b], ps[0].second, ps[1].second));
    h = relu(linear(h, ps[2].second, ps[3].second));
    Tensor loss = cross_entropy(linear(h, ps[4].second, ps[5].second), data.y[b]);
    loss.backward();
    opt->step();
    opt->zero_grad();
    if (t >= kSteps - kTail) tail += loss.item() / kTail;
  }
  return tail;
}

OptimizerConfig config(const char* name, double lr) {
  OptimizerConfig c;
  c.kind = *choice_named<OptimizerKind>(name);
  c.lr = lr;
  c.weight_decay = 0.01;
  return c;
}

bool have_fashion_mnist() {
  return std::filesystem::exists(std::string(kFashionMnistDir) + "/t10k-images-idx3-ubyte.gz");
}

}  // namespace

// The task is real data: where the Debian package is absent (the GPU machine), skip, don't fail.
TEST(OptimLeanConverge, AdamW8bitTracksAdamW) {
  if (!have_fashion_mnist()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  const double full = train(config("adamw", 2e-3)), q8 = train(config("adamw8bit", 2e-3));
  const double slow = train(config("adamw", 1e-3));
  std::printf("fashion-mnist MLP, mean loss of the last %lld steps: adamw %.4f, adamw8bit %.4f, adamw at lr/2 %.4f\n",
              (long long)kTail, full, q8, slow);
  EXPECT_LT(full, 0.75);  // it learned (ln 10 = 2.30 at the start)
  EXPECT_NEAR(q8, full, kTolerance);
  EXPECT_GT(std::abs(slow - full), kTolerance);
}

TEST(OptimLeanConverge, Lion8bitTracksLion) {
  if (!have_fashion_mnist()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  const double full = train(config("lion", 3e-4)), q8 = train(config("lion8bit", 3e-4));
  const double slow = train(config("lion", 1.5e-4));
  std::printf("fashion-mnist MLP, mean loss of the last %lld steps: lion %.4f, lion8bit %.4f, lion at lr/2 %.4f\n",
              (long long)kTail, full, q8, slow);
  EXPECT_LT(full, 0.75);
  EXPECT_NEAR(q8, full, kTolerance);
  EXPECT_GT(std::abs(slow - full), kTolerance);
}
