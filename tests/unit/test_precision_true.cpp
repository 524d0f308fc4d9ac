// The -true policies: the model built in 16-bit, with or without f32 master weights. Byte counts
// are exact: each tensor is charged what the allocator charges (512-byte rounding).
#include <gtest/gtest.h>

#include "train/recipe_table.h"
#include "unit/error_of.h"

#include <cmath>

#include "leantrain/ops.h"
#include "leantrain/optim.h"
#include "leantrain/safetensors.h"
#include "train_test_util.h"

using namespace lt;
using namespace lt::test;

namespace {

// Records the dtype of every gradient as it is accumulated (before the step frees it).
void watch_grad_dtypes(const std::vector<Tensor>& params, std::vector<DType>& out) {
  for (Tensor p : params) p.register_post_accumulate_grad_hook([&out](Tensor& q) { out.push_back(q.grad().dtype()); });
}

int64_t largest(const std::vector<Tensor>& ps) {
  int64_t m = 0;
  for (const Tensor& p : ps) m = std::max(m, p.numel());
  return m;
}

}  // namespace

TEST(PrecisionTrue, Bf16TrueWithMasterWeightsKeepsF32CopiesAsOptimizerState) {
  TempDir tmp;
  RunConfig c = tiny_gpt(tmp.path);
  c.precision = Precision::TrueBf16;
  c.master_weights = MasterWeights::Fp32;
  const int64_t p0 = category_current(Category::Parameter), s0 = category_current(Category::OptimizerState);
  TrainerRun r(c);
  std::vector<Tensor> params = r->model().parameters();
  for (const Tensor& p : params) EXPECT_EQ(p.dtype(), DType::BF16);
  const int64_t half = rounded_bytes(params, 2), full = rounded_bytes(params, 4);
  EXPECT_EQ(category_current(Category::Parameter) - p0, half);  // 2 bytes per parameter, no f32 copy
  std::vector<DType> grad_dtypes;
  watch_grad_dtypes(params, grad_dtypes);

  allocator_for(Device::cpu()).reset_peak_stats();
  const int64_t g0 = category_current(Category::Gradient), w0 = category_current(Category::Workspace);
  ASSERT_TRUE(r->step().applied);
  // Master copy + exp_avg + exp_avg_sq, all f32.
  EXPECT_EQ(category_current(Category::OptimizerState) - s0, 3 * full);
  int64_t numel = 0;
  for (const Tensor& p : params) numel += p.numel();
  EXPECT_EQ(r->optimizer().state_bytes(), 3 * 4 * numel);
  EXPECT_EQ(category_peak(Category::Gradient) - g0, half);  // bf16 gradients
  // The f32 gradient the master update reads exists for one parameter at a time.
  EXPECT_EQ(category_peak(Category::Workspace) - w0, round_allocation(4 * largest(params)));
  ASSERT_EQ(grad_dtypes.size(), params.size());
  for (DType d : grad_dtypes) EXPECT_EQ(d, DType::BF16);
  for (const Tensor& p : params) {
    Tensor m = r->optimizer().master_of(p);
    ASSERT_TRUE(m.defined());
    EXPECT_EQ(m.dtype(), DType::F32);
    EXPECT_EQ(m.category(), Category::OptimizerState);
    EXPECT_EQ(bytes_of(cast(m, DType::BF16)), bytes_of(p));  // the parameter is the rounded master
  }
}

TEST(PrecisionTrue, Bf16TrueWithoutMasterHasNoF32ParametersOrGradients) {
  TempDir tmp;
  RunConfig c = tiny_gpt(tmp.path);
  c.precision = Precision::TrueBf16;
  const int64_t p0 = category_current(Category::Parameter), s0 = category_current(Category::OptimizerState);
  TrainerRun r(c);
  std::vector<Tensor> params = r->model().parameters();
  const int64_t half = rounded_bytes(params, 2);
  EXPECT_EQ(category_current(Category::Parameter) - p0, half);
  std::vector<DType> grad_dtypes;
  watch_grad_dtypes(params, grad_dtypes);
  allocator_for(Device::cpu()).reset_peak_stats();
  const int64_t g0 = category_current(Category::Gradient);
  ASSERT_TRUE(r->step().applied);
  EXPECT_EQ(category_peak(Category::Gradient) - g0, half);  // every gradient alive at once, all 2 bytes
  EXPECT_EQ(category_current(Category::OptimizerState) - s0, 2 * half);  // bf16 moments
  for (DType d : grad_dtypes) EXPECT_EQ(d, DType::BF16);
  for (const Tensor& p : params) {
    EXPECT_EQ(p.dtype(), DType::BF16);
    EXPECT_FALSE(r->optimizer().master_of(p).defined());
  }
}

TEST(PrecisionTrue, MasterWeightsKeepUpdatesThat16BitWouldRoundAway) {
  // lr * grad = 1e-3 is below half of bf16's spacing at 1.0, so a bf16 parameter never moves,
  // while its f32 master accumulates the steps and the rounded parameter follows.
  for (bool master : {false, true}) {
    Tensor p = full({1024}, 1.0, DType::BF16);
    p.set_requires_grad(true);
    SgdOptions o;
    o.lr = 1.0;
    SGD sgd(std::vector<NamedTensor>{{"w", p}}, o);
    sgd.set_master_weights(master);
    for (int i = 0; i < 10; ++i) {
      p.set_grad(full({1024}, 1e-3, DType::BF16));
      sgd.step();
    }
    float v = p.to_float_vector()[0];
    if (!master) {
      EXPECT_EQ(v, 1.0f);
      EXPECT_EQ(sgd.state_bytes(), 0);
    } else {
      float want = 1.0f;
      const float g = bf16_to_float(float_to_bf16(1e-3f));
      for (int i = 0; i < 10; ++i) want -= g;
      EXPECT_EQ(sgd.master_of(p).to_float_vector()[0], want);
      EXPECT_EQ(v, bf16_to_float(float_to_bf16(want)));
      EXPECT_LT(v, 1.0f);
      EXPECT_EQ(sgd.state_bytes(), 1024 * 4);  // SGD without momentum keeps only the master copy
    }
  }
}

TEST(PrecisionTrue, MasterWeightsRoundTripAndResumeIsExact) {
  TempDir tmp;
  RunConfig c = tiny_gpt(tmp.path);
  c.precision = Precision::TrueBf16;
  c.master_weights = MasterWeights::Fp32;
  RunResult straight = train(c);
  RunConfig first = c;
  first.stop_at = 2;
  first.save = (tmp.path / "ck").string();
  RunResult a = train(first);
  auto opt = io::load_safetensors(first.save + "/optimizer.safetensors");
  auto model = io::load_safetensors(first.save + "/model.safetensors");
  int masters = 0;
  for (auto& [k, t] : opt)
    if (k.size() > 7 && k.compare(k.size() - 7, 7, ".master") == 0) {
      ++masters;
      EXPECT_EQ(t.dtype(), DType::F32) << k;
    }
  EXPECT_EQ(masters, int(model.size()));
  for (auto& [k, t] : model) EXPECT_EQ(t.dtype(), DType::BF16) << k;

  RunConfig second = c;
  second.resume = first.save;
  RunResult b = train(second);
  std::vector<double> joined = a.losses;
  joined.insert(joined.end(), b.losses.begin(), b.losses.end());
  EXPECT_EQ(joined, straight.losses);  // bit for bit: the master copies came back

  // Resuming those master copies without master weights is refused, naming the flag.
  RunConfig plain = c;
  plain.master_weights = MasterWeights::None;
  plain.resume = first.save;
  try {
    train(plain);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("master"), std::string::npos) << e.what();
    EXPECT_NE(e.fix().find("--master-weights fp32"), std::string::npos) << e.fix();
  }
}

TEST(PrecisionTrue, F16TrueWarnsAndANanLossIsAClearError) {
  TempDir tmp;
  RunConfig c = tiny_gpt(tmp.path);
  c.precision = Precision::True16;
  c.debug_nan_at_step = 2;
  std::vector<std::string> messages;
  RunObserver obs;
  obs.on_message = [&](const std::string& s) { messages.push_back(s); };
  try {
    train(c, obs);
    FAIL() << "no error";
  } catch (const NumericError& e) {
    EXPECT_NE(std::string(e.what()).find("NaN at step 2"), std::string::npos) << e.what();
  }
  int warnings = 0;
  for (auto& m : messages) warnings += m.rfind("warning: --precision 16-true", 0) == 0;
  EXPECT_EQ(warnings, 1);
}

TEST(PrecisionTrue, BadPrecisionFlagsAreUsageErrors) {
  RunConfig c;
  c.device = "cpu";
  auto message = [&](const RunConfig& cfg) -> std::string {
    try {
      validate(cfg);
    } catch (const UsageError& e) {
      return std::string(e.what()) + " | " + e.fix();
    }
    return "";
  };
  const std::string unknown = test::error_of([&] { set_choice(*recipe_field("--precision"), c, "fp16"); });
  EXPECT_NE(unknown.find("--precision fp16"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("32-true, 16-mixed, bf16-mixed, 16-true or bf16-true"), std::string::npos) << unknown;
  c.precision = Precision::True32;
  c.master_weights = MasterWeights::Fp32;
  EXPECT_NE(message(c).find("already f32"), std::string::npos);
  c.precision = Precision::MixedBf16;
  EXPECT_NE(message(c).find("already f32"), std::string::npos);
  c.precision = Precision::TrueBf16;
  EXPECT_EQ(message(c), "");
  EXPECT_NE(test::error_of([&] { set_choice(*recipe_field("--master-weights"), c, "fp16"); }).find("--master-weights fp16"),
            std::string::npos);
}
