// The -mixed policies: f32 parameters and gradients with 16-bit matmuls under autocast, and
// 16-mixed's loss scaling inside the trainer (overflow skips the step, the scale round-trips).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "leantrain/autocast.h"
#include "leantrain/models.h"
#include "train_test_util.h"
#include "train/checkpoint.h"
#include "train/precision_hooks.h"

using namespace lt;
using namespace lt::test;

namespace {

std::shared_ptr<models::GPT2> small_gpt() {
  models::GPT2Config cfg = models::GPT2Config::preset("gpt2-tiny");
  cfg.n_embd = 32;
  cfg.n_layer = 2;
  cfg.n_head = 2;
  cfg.n_positions = 16;
  nn::InitOptions init;
  init.seed = 3;
  MemoryCategoryScope p(Category::Parameter);
  return std::make_shared<models::GPT2>(cfg, init);
}

struct ForwardTrace {
  std::vector<DType> linear_out;  // dtype of every Linear module's output
  int64_t linear_bytes = 0;       // bytes the linear op allocated during the forward
  int64_t linear_allocs = 0;
  DType loss_dtype = DType::F32;
};

// One forward + backward of a fresh model under `autocast`; the model is returned for inspection.
ForwardTrace run_once(std::optional<DType> autocast, std::shared_ptr<models::GPT2>& model) {
  model = small_gpt();
  ForwardTrace tr;
  for (auto& [path, m] : model->named_modules())
    if (dynamic_cast<nn::Linear*>(m))
      m->set_forward_wrapper([&tr](nn::Module&, const Tensor& x, const nn::Module::ForwardFn& f) {
        Tensor y = f(x);
        tr.linear_out.push_back(y.dtype());
        return y;
      });
  std::vector<int64_t> ids(2 * 16), next(2 * 16);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t((i * 37 + 11) % 256), next[i] = int64_t((i * 53 + 5) % 256);
  Tensor x = from_ints(ids, {2, 16}), y = from_ints(next, {2, 16});
  Allocator& a = allocator_for(Device::cpu());
  MemoryCategoryScope act(Category::Activation);
  AutocastGuard guard(autocast);
  a.clear_history();
  a.set_history(true);
  Tensor loss = model->loss(x, y);
  a.set_history(false);
  for (const MemoryEvent& e : a.history())
    if (e.action == MemoryEvent::Action::Alloc && std::strcmp(e.op, "linear") == 0) {
      tr.linear_bytes += e.size;
      ++tr.linear_allocs;
    }
  a.clear_history();
  tr.loss_dtype = loss.dtype();
  loss.backward();
  return tr;
}

LossScaleHook* scaler_of(Trainer& t) {
  for (auto& h : t.hooks())
    if (auto* s = dynamic_cast<LossScaleHook*>(h.get())) return s;
  return nullptr;
}

}  // namespace

TEST(PrecisionMixed, MatmulsRunIn16BitWhileParamsAndGradsStayF32) {
  std::shared_ptr<models::GPT2> ref_model;
  ForwardTrace ref = run_once(std::nullopt, ref_model);
  ASSERT_GT(ref.linear_allocs, 0);
  for (DType dt : {DType::BF16, DType::F16}) {
    std::shared_ptr<models::GPT2> model;
    ForwardTrace tr = run_once(dt, model);
    ASSERT_EQ(tr.linear_out.size(), ref.linear_out.size());
    for (DType d : tr.linear_out) EXPECT_EQ(d, dt);
    for (DType d : ref.linear_out) EXPECT_EQ(d, DType::F32);
    // Every tensor the GEMMs allocate (outputs, saved for the next op's backward) is half the size:
    // the matmuls run in 16-bit. Every size here is a multiple of 1 KiB, so no rounding blurs it.
    EXPECT_EQ(tr.linear_allocs, ref.linear_allocs);
    EXPECT_EQ(2 * tr.linear_bytes, ref.linear_bytes);
    EXPECT_EQ(tr.loss_dtype, DType::F32);  // cross-entropy's loss is f32 for 16-bit logits
    for (auto& [name, p] : model->named_parameters()) {
      EXPECT_EQ(p.dtype(), DType::F32) << name;
      ASSERT_TRUE(p.grad().defined()) << name;
      EXPECT_EQ(p.grad().dtype(), DType::F32) << name;  // the recorded casts bring gradients back to f32
    }
  }
}

TEST(PrecisionMixed, AutocastIsOffOutsideTheGuardAndNests) {
  EXPECT_FALSE(autocast_dtype());
  {
    AutocastGuard a(DType::BF16);
    EXPECT_EQ(*autocast_dtype(), DType::BF16);
    {
      AutocastGuard off(std::nullopt);
      EXPECT_FALSE(autocast_dtype());
      Tensor t = zeros({4});
      EXPECT_TRUE(autocast(t).same(t));
    }
    EXPECT_EQ(autocast(zeros({4})).dtype(), DType::BF16);
    EXPECT_EQ(autocast(zeros({4}, DType::F64)).dtype(), DType::F64);  // only f32 is cast
  }
  EXPECT_FALSE(autocast_dtype());
  EXPECT_THROW(AutocastGuard{DType::F64}, Error);  // braces: with parentheses clang reads a declaration
}

TEST(PrecisionMixed, OverflowSkipsTheStepAndHalvesTheScale) {
  TempDir tmp;
  RunConfig c = tiny_gpt(tmp.path);
  c.precision = Precision::Mixed16;
  TrainerRun r(c);
  LossScaleHook* hook = scaler_of(*r);
  ASSERT_NE(hook, nullptr);
  StepOutcome first = r->step();
  ASSERT_TRUE(first.applied);
  EXPECT_EQ(hook->scaler().scale(), 65536.0);
  for (auto& p : r->model().parameters()) EXPECT_EQ(p.dtype(), DType::F32);

  auto params = bytes_of(r->model().parameters());
  OptimizerStateDict sd = r->optimizer().state_dict();
  std::vector<Tensor> state;
  for (auto& [k, t] : sd.tensors) state.push_back(t);
  auto state_bytes = bytes_of(state);
  ASSERT_FALSE(state.empty());

  // Inject an overflow: at 2^40 the f16 logit gradients (~2^40 / 128 rows) exceed 65504.
  hook->load_state(R"({"scale": 1099511627776.0, "growth_tracker": 5})");
  StepOutcome skipped = r->step();
  EXPECT_FALSE(skipped.applied);
  EXPECT_FALSE(std::isfinite(skipped.grad_norm));
  EXPECT_TRUE(std::isfinite(skipped.loss));
  EXPECT_EQ(bytes_of(r->model().parameters()), params);  // bitwise unchanged
  OptimizerStateDict after = r->optimizer().state_dict();
  std::vector<Tensor> state_after;
  for (auto& [k, t] : after.tensors) state_after.push_back(t);
  EXPECT_EQ(bytes_of(state_after), state_bytes);
  EXPECT_EQ(r->optimizer().step_count(), 1);
  EXPECT_EQ(hook->scaler().scale(), 549755813888.0);  // 2^39
  EXPECT_EQ(hook->scaler().growth_tracker(), 0);
  EXPECT_EQ(hook->scaler().skipped(), 1);
  EXPECT_EQ(r->steps_done(), 2);  // the run's step (and lr schedule) moves on, as in PyTorch

  hook->load_state(R"({"scale": 65536.0, "growth_tracker": 0})");
  StepOutcome next = r->step();
  EXPECT_TRUE(next.applied);
  EXPECT_NE(bytes_of(r->model().parameters()), params);
  EXPECT_EQ(r->optimizer().step_count(), 2);
}

TEST(PrecisionMixed, TrainerRunsBf16MixedWithoutAScaler) {
  TempDir tmp;
  RunConfig c = tiny_gpt(tmp.path);
  c.precision = Precision::MixedBf16;
  c.eval_batches = 1;
  TrainerRun r(c);
  EXPECT_EQ(scaler_of(*r), nullptr);  // bf16 has f32's range: no scaler
  std::vector<DType> outs;
  for (auto& [path, m] : r->model().named_modules())
    if (dynamic_cast<nn::Linear*>(m))
      m->set_forward_wrapper([&outs](nn::Module&, const Tensor& x, const nn::Module::ForwardFn& f) {
        Tensor y = f(x);
        outs.push_back(y.dtype());
        return y;
      });
  StepOutcome o = r->step();
  EXPECT_TRUE(o.applied);
  ASSERT_FALSE(outs.empty());
  for (DType d : outs) EXPECT_EQ(d, DType::BF16);  // the trainer's forward ran under autocast
  outs.clear();
  r->evaluate();
  ASSERT_FALSE(outs.empty());
  for (DType d : outs) EXPECT_EQ(d, DType::BF16);  // and so does evaluation
  for (auto& p : r->model().parameters()) EXPECT_EQ(p.dtype(), DType::F32);
}

TEST(PrecisionMixed, ScaleIsCheckpointedAndResumeIsExact) {
  TempDir tmp;
  RunConfig c = tiny_gpt(tmp.path);
  c.precision = Precision::Mixed16;
  RunResult straight = train(c);
  ASSERT_EQ(straight.losses.size(), 4u);
  for (double l : straight.losses) EXPECT_TRUE(std::isfinite(l));

  RunConfig first = c;
  first.stop_at = 2;
  first.save = (tmp.path / "ck").string();
  RunResult a = train(first);
  std::ifstream f(tmp.path / "ck" / "trainer_state.json");
  nlohmann::json st = nlohmann::json::parse(f);
  nlohmann::json scaler = nlohmann::json::parse(st["hooks"]["loss_scaler"].get<std::string>());
  EXPECT_EQ(scaler["scale"].get<double>(), 65536.0);
  EXPECT_EQ(scaler["growth_tracker"].get<int64_t>(), 2);
  EXPECT_EQ(st["config"]["precision"], "16-mixed");

  // A trainer restored from it carries the same scaler state.
  TrainerRun r(c);
  load_checkpoint(first.save, *r);
  EXPECT_EQ(scaler_of(*r)->scaler().state_json(), scaler.dump());

  RunConfig second = c;
  second.resume = first.save;
  RunResult b = train(second);
  std::vector<double> joined = a.losses;
  joined.insert(joined.end(), b.losses.begin(), b.losses.end());
  EXPECT_EQ(joined, straight.losses);  // bit for bit
}
