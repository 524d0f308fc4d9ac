// --fused-step: the optimizer step inside backward gives the same parameters as the usual step,
// bit for bit on the CPU, while at most one parameter's gradient exists at a time.
#include <gtest/gtest.h>

#include "train/recipe_table.h"

#include <fstream>

#include "leantrain/cuda_info.h"
#include "leantrain/fused_step.h"
#include "leantrain/models.h"
#include "leantrain/plan.h"
#include "memory/caching_policy.h"
#include "memory/host_allocators.h"
#include "train_test_util.h"
#include "unit/knob_env.h"

using namespace lt;
using namespace lt::test;

namespace {

std::shared_ptr<models::GPT2> small_gpt() {
  models::GPT2Config cfg = models::GPT2Config::preset("gpt2-tiny");
  cfg.n_embd = 32;
  cfg.n_layer = 2;
  cfg.n_head = 2;
  cfg.n_positions = 16;
  cfg.resid_pdrop = cfg.embd_pdrop = 0.1;  // dropout on: both runs must draw the same masks
  nn::InitOptions init;
  init.seed = 5;
  MemoryCategoryScope p(Category::Parameter);
  return std::make_shared<models::GPT2>(cfg, init);
}

std::unique_ptr<Optimizer> optimizer_for(const std::string& name, models::Model& m) {
  OptimizerConfig oc;
  oc.kind = *choice_named<OptimizerKind>(name);
  oc.lr = name == "sgd" ? 0.05 : 3e-3;
  oc.momentum = name == "sgd" ? 0.9 : 0.0;
  oc.weight_decay = 0.1;
  return make_optimizer(oc, decay_groups(m.named_parameters()));
}

std::pair<Tensor, Tensor> batch(int step) {
  std::vector<int64_t> ids(2 * 16), next(2 * 16);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = int64_t((i * 37 + 11 + 13 * step) % 256);
    next[i] = int64_t((i * 53 + 5 + 7 * step) % 256);
  }
  return {from_ints(ids, {2, 16}), from_ints(next, {2, 16})};
}

std::vector<Tensor> state_tensors(const Optimizer& o) {
  std::vector<Tensor> out;
  for (auto& [k, t] : o.state_dict().tensors) out.push_back(t);
  return out;
}

using test::KnobEnv;

int64_t largest_bytes(const std::vector<Tensor>& ps) {
  int64_t m = 0;
  for (const Tensor& p : ps) m = std::max(m, round_allocation(p.nbytes()));
  return m;
}

}  // namespace

TEST(FusedStep, SameParametersAsTheUnfusedStepBitwise) {
  for (const char* name : {"sgd", "adamw"}) {
    auto a = small_gpt(), b = small_gpt();
    auto opt_a = optimizer_for(name, *a), opt_b = optimizer_for(name, *b);
    FusedStep fused(*opt_b);
    const int64_t n = int64_t(b->parameters().size());
    for (int step = 0; step < 4; ++step) {
      auto [x, y] = batch(step);
      const double lr = (step + 1) * (std::string(name) == "sgd" ? 0.01 : 1e-3);
      opt_a->set_lr(lr);
      opt_b->set_lr(lr);  // before backward: that is where the fused step runs
      MemoryCategoryScope act(Category::Activation);
      a->loss(x, y).backward();
      opt_a->step();
      opt_a->zero_grad();
      b->loss(x, y).backward();
      EXPECT_EQ(fused.updates(), n * (step + 1)) << name;
      for (const Tensor& p : b->parameters()) EXPECT_FALSE(p.grad().defined()) << name;  // freed in the hook
    }
    EXPECT_EQ(bytes_of(a->parameters()), bytes_of(b->parameters())) << name;
    EXPECT_EQ(bytes_of(state_tensors(*opt_a)), bytes_of(state_tensors(*opt_b))) << name;
    EXPECT_EQ(opt_a->step_count(), opt_b->step_count());
  }
}

TEST(FusedStep, GradientPeakIsTheLargestSingleParameter) {
  for (bool fuse : {false, true}) {
    auto m = small_gpt();
    auto opt = optimizer_for("adamw", *m);
    std::unique_ptr<FusedStep> fused;
    if (fuse) fused = std::make_unique<FusedStep>(*opt);
    auto [x, y] = batch(0);
    std::vector<Tensor> params = m->parameters();
    allocator_for(Device::cpu()).reset_peak_stats();
    const int64_t g0 = category_current(Category::Gradient);
    {
      MemoryCategoryScope act(Category::Activation);
      m->loss(x, y).backward();
    }
    if (!fuse) opt->step();
    const int64_t peak = category_peak(Category::Gradient) - g0;
    if (fuse) {
      // wte [256, 32] f32: one parameter's gradient, not the model's.
      EXPECT_EQ(peak, largest_bytes(params));
      EXPECT_EQ(peak, 256 * 32 * 4);
    } else {
      EXPECT_EQ(peak, rounded_bytes(params, 4));
    }
    opt->zero_grad();
  }
}

TEST(FusedStep, DisarmedWhenDestroyed) {
  auto m = small_gpt();
  auto opt = optimizer_for("sgd", *m);
  { FusedStep fused(*opt); }
  auto before = bytes_of(m->parameters());
  auto [x, y] = batch(0);
  m->loss(x, y).backward();
  EXPECT_EQ(bytes_of(m->parameters()), before);
  for (const Tensor& p : m->parameters()) EXPECT_TRUE(p.grad().defined());  // backward as usual
}

// The trainer with --fused-step against the usual step, alone and composed with other switches.
TEST(FusedStep, TrainerRunsMatchTheUnfusedOnes) {
  TempDir tmp;
  struct Case {
    std::string optimizer, precision, master;
  };
  for (const Case& k : {Case{"adamw", "32-true", "none"}, Case{"sgd", "32-true", "none"},
                        Case{"adamw", "bf16-mixed", "none"}, Case{"adamw", "bf16-true", "fp32"}}) {
    RunConfig c = tiny_gpt(tmp.path);
    c.optimizer = *choice_named<OptimizerKind>(k.optimizer);
    c.precision = *choice_named<Precision>(k.precision);
    c.master_weights = *choice_named<MasterWeights>(k.master);
    RunResult plain = train(c);
    c.fused_step = true;
    RunResult fused = train(c);
    EXPECT_EQ(fused.losses, plain.losses) << k.optimizer << " " << k.precision;  // bit for bit
    TrainerRun r(c);  // the model, to know its largest parameter
    const int64_t bytes = k.precision == "bf16-true" ? 2 : 4;
    int64_t largest = 0, all = 0;
    for (const Tensor& p : r->model().parameters()) {
      largest = std::max(largest, round_allocation(p.numel() * bytes));
      all += round_allocation(p.numel() * bytes);
    }
    EXPECT_EQ(fused.memory.category[int(Category::Gradient)].peak, largest) << k.precision;
    EXPECT_EQ(plain.memory.category[int(Category::Gradient)].peak, all) << k.precision;
  }
}

// --fused-step --clip: a norm pass, then the updating pass with the clip coefficient. The same
// training as the usual clipped step, up to the order in which the norm's squares are summed
// (backward order here, parameter order there), with dropout on (both passes must draw the
// same masks) and still one parameter's gradient at a time.
TEST(FusedStep, ClipsThroughANormPass) {
  TempDir tmp;
  RunConfig c = tiny_gpt(tmp.path);
  std::ofstream(tmp.path / "config.json")
      << R"({"model_type": "gpt2", "vocab_size": 256, "n_positions": 64, "n_embd": 32, "n_layer": 2, "n_head": 2,
             "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1})";
  c.model_config = (tmp.path / "config.json").string();
  c.dim = c.depth = c.heads = 0;
  c.optimizer = OptimizerKind::Sgd;
  c.lr = 0.5;
  c.steps = 6;
  RunResult unclipped = train(c);
  c.clip = 0.25;  // well under the gradient norm (about 2 to 4 here): every step is clipped
  RunResult plain = train(c);
  c.fused_step = true;
  RunResult fused = train(c);
  ASSERT_EQ(fused.losses.size(), plain.losses.size());
  double moved = 0;
  for (size_t i = 0; i < plain.losses.size(); ++i) {
    EXPECT_NEAR(fused.losses[i], plain.losses[i], 1e-5 * std::abs(plain.losses[i])) << "step " << i + 1;
    moved = std::max(moved, std::abs(plain.losses[i] - unclipped.losses[i]));
  }
  EXPECT_GT(moved, 1e-3) << "clipping changed the run";
  TrainerRun r(c);
  int64_t largest = 0;
  for (const Tensor& p : r->model().parameters()) largest = std::max(largest, round_allocation(p.nbytes()));
  EXPECT_EQ(fused.memory.category[int(Category::Gradient)].peak, largest);
}

// --fused-step with micro-batches runs breadth-first: every micro-batch's forward, then one backward
// depth by depth in which each parameter's gradient is summed over the micro-batches, applied and
// freed. Accumulation's arithmetic in accumulation's order: bit for bit on a ViT (no parameter is
// used twice in one forward), for checkpointed and uncheckpointed blocks, f32 and bf16, with a
// norm pass (--clip), while no gradient outlives its parameter's update.
TEST(FusedStep, BreadthFirstMicroBatchesMatchAccumulationBitwise) {
  struct Case {
    std::string optimizer, precision, checkpoint;
    double clip;
  };
  for (const Case& k : {Case{"sgd", "32-true", "blocks", 0}, Case{"adamw", "32-true", "every:2", 0},
                        Case{"sgd", "bf16-true", "blocks", 1.0}, Case{"adamw", "bf16-mixed", "selective", 0}}) {
    RunConfig c;
    c.model = "vit-tiny";
    c.data = "synthetic";
    c.batch = 8;
    c.micro_batch = 2;
    c.steps = 3;
    c.eval_batches = 1;
    c.device = "cpu";
    c.warmup = 0;
    c.optimizer = *choice_named<OptimizerKind>(k.optimizer);
    c.lr = k.optimizer == "sgd" ? 0.05 : 3e-3;
    c.precision = *choice_named<Precision>(k.precision);
    c.checkpoint = parse_checkpoint_flag(k.checkpoint);
    c.clip = k.clip;
    const std::string what = k.optimizer + " " + k.precision + " " + k.checkpoint;
    RunResult plain = train(c);
    c.fused_step = true;
    RunResult fused = train(c);
    ASSERT_EQ(fused.losses.size(), 3u) << what;
    if (k.clip > 0) {  // the norm's squares are summed in another order: equal up to that
      for (size_t i = 0; i < plain.losses.size(); ++i)
        EXPECT_NEAR(fused.losses[i], plain.losses[i], 1e-5 * std::abs(plain.losses[i])) << what << " step " << i + 1;
    } else {
      EXPECT_EQ(fused.losses, plain.losses) << what;
    }
    TrainerRun r(c);
    int64_t largest = 0;
    const int64_t bytes = k.precision == "bf16-true" ? 2 : 4;
    for (const Tensor& p : r->model().parameters()) largest = std::max(largest, round_allocation(p.numel() * bytes));
    EXPECT_EQ(fused.memory.category[int(Category::Gradient)].peak, largest) << what;
    if (k.checkpoint == "blocks")
      EXPECT_LT(fused.memory.allocated_bytes.peak, plain.memory.allocated_bytes.peak) << what;
  }
}

// ViT-tiny on the CPU, batch 8 in micro-batches of 2, checkpointed blocks, --fused-step:
// the breadth-first step.
RunConfig breadth_first_vit_tiny(int64_t steps) {
  RunConfig c;
  c.model = "vit-tiny";
  c.data = "synthetic";
  c.batch = 8;
  c.micro_batch = 2;
  c.steps = steps;
  c.eval_batches = 1;
  c.device = "cpu";
  c.checkpoint = nn::CheckpointSpec::blocks();
  c.fused_step = true;
  return c;
}

// Breadth-first reads every micro-batch's loss after the last forward, and before the backward
// whose fused updates change parameters: a NaN in micro-batch 1 stops the step with no update.
TEST(FusedStep, BreadthFirstNanLossStopsBeforeAnyUpdate) {
  RunConfig c = breadth_first_vit_tiny(3);
  c.optimizer = OptimizerKind::Sgd;
  c.debug_nan_at_step = 2;
  TrainerRun r(c);
  r->step();
  std::vector<std::vector<float>> before;
  for (const Tensor& p : r->model().parameters()) before.push_back(p.to_float_vector());
  try {
    r->step();
    FAIL() << "no error";
  } catch (const NumericError& e) {
    EXPECT_NE(std::string(e.what()).find("NaN at step 2 (micro-batch 1 of 4)"), std::string::npos) << e.what();
  }
  size_t i = 0;
  for (const Tensor& p : r->model().parameters()) EXPECT_EQ(p.to_float_vector(), before[i++]) << "parameter " << i;
}

// The breadth-first step is planned like any other: the dry run allocates what the cpu run does.
TEST(FusedStep, BreadthFirstPlanEqualsTheCpuRun) {
  RunConfig c = breadth_first_vit_tiny(2);
  const PlanResult p = plan_run(c, PlanOptions{"cpu"});
  const int64_t before = allocator_for(Device::cpu()).stats().allocated_bytes.current;
  const RunResult r = train(c);
  EXPECT_EQ(r.memory.allocated_bytes.peak - before, p.peak_allocated);
}

TEST(FusedStep, RefusedCombinationsAreUsageErrors) {
  RunConfig c;
  c.device = "cpu";
  c.fused_step = true;
  c.batch = 16;
  auto message = [](const RunConfig& cfg) -> std::string {
    try {
      validate(cfg);
    } catch (const UsageError& e) {
      return std::string(e.what()) + " | " + e.why() + " | " + e.fix();
    }
    return "";
  };
  EXPECT_EQ(message(c), "");
  RunConfig acc = c;
  acc.micro_batch = 4;
  EXPECT_NE(message(acc).find("--fused-step with --micro-batch 4 < --batch 16 and no --checkpoint"), std::string::npos)
      << message(acc);
  acc.checkpoint = nn::CheckpointSpec::blocks();
  EXPECT_EQ(message(acc), "") << "breadth-first (BreadthFirstMicroBatchesMatchAccumulationBitwise)";
  acc.offload_activations = true;
  EXPECT_NE(message(acc).find("--fused-step with --micro-batch and --offload-activations"), std::string::npos)
      << message(acc);
  RunConfig clip = c;
  clip.clip = 1.0;
  EXPECT_EQ(message(clip), "") << "clipping runs a norm pass (ClipsThroughANormPass)";
  RunConfig scaled = c;
  scaled.precision = Precision::Mixed16;
  EXPECT_NE(message(scaled).find("--fused-step with --precision 16-mixed"), std::string::npos);
  EXPECT_NE(message(scaled).find("bf16-mixed"), std::string::npos);
  RunConfig ok = c;
  ok.precision = Precision::TrueBf16;
  ok.master_weights = MasterWeights::Fp32;
  EXPECT_EQ(message(ok), "");
}

namespace {

// LEANTRAIN_OPT_STREAM (Note [Updates beside the backward], fused_step.cpp) on meta: six
// parameters whose gradients are freed beside the backward. Until the compute stream has waited
// for the optimizer stream, their blocks wait outside the pools (a reuse would race the update);
// join() orders the compute stream after every update, and the next allocation takes them back.
// With the knob off nothing waits.
TEST(FusedStep, UpdatesBesideTheBackwardHoldTheirGradientsUntilJoinedOnMeta) {
  for (const char* mode : {"0", "1"}) {
    MetaAllocatorScope sim(true);
    KnobEnv on("LEANTRAIN_OPT_STREAM", mode), lag("LEANTRAIN_OPT_STREAM_LAG", "2");
    const Device d = Device::meta();
    CachingAllocator* al = as_caching(allocator_for(d));
    ASSERT_NE(al, nullptr);
    std::vector<NamedTensor> params;
    for (int i = 0; i < 6; ++i) {
      MemoryCategoryScope p(Category::Parameter);
      Tensor t = Tensor::empty({256, 1024}, DType::F32, d);  // 1 MiB each: the large pool
      t.set_requires_grad(true);
      params.emplace_back("p" + std::to_string(i), t);
    }
    AdamW opt({ParamGroup{params, std::nullopt}}, AdamWOptions{});
    FusedStep fused(opt);
    {
      MemoryCategoryScope act(Category::Activation);
      Tensor loss = sum_all(mul(params[0].second, params[0].second));
      for (size_t i = 1; i < params.size(); ++i) loss = add(loss, sum_all(mul(params[i].second, params[i].second)));
      loss.backward();
    }
    EXPECT_EQ(fused.updates(), 6) << mode;
    if (std::string(mode) == "1") EXPECT_GT(al->waiting_bytes(), 0) << "freed gradients were handed out at once";
    else EXPECT_EQ(al->waiting_bytes(), 0);
    fused.join();
    const Tensor next = Tensor::empty({16}, DType::F32, d);  // an allocation applies rule 1
    EXPECT_TRUE(next.defined());
    EXPECT_EQ(al->waiting_bytes(), 0) << mode;
  }
}

// On the GPU: the same losses, bit for bit, as the in-turn fused step and the usual step, whatever
// the lag, with kept casts too; the run's peak is its plan's (the plan replays the stream order).
TEST(FusedStep, CudaUpdatesBesideTheBackwardGiveTheSameBitsAndThePlannedPeak) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  TempDir tmp;
  RunConfig c = tiny_gpt(tmp.path);
  c.device = "cuda";
  c.precision = Precision::MixedBf16;
  const RunResult plain = train(c);
  c.fused_step = true;
  const RunResult in_turn = train(c);
  EXPECT_EQ(in_turn.losses, plain.losses);
  for (auto [lag, keep] : {std::pair{"1", "0"}, std::pair{"8", "0"}, std::pair{"8", "1"}}) {
    KnobEnv on("LEANTRAIN_OPT_STREAM", "1"), l("LEANTRAIN_OPT_STREAM_LAG", lag), k("LEANTRAIN_KEEP_CASTS", keep);
    const PlanResult p = plan_run(c);
    const Device d = Device::cuda(0);
    const int64_t before = allocator_for(d).stats().allocated_bytes.current;
    const int64_t held_workspace = cuda_memory_info(0).workspace_bytes;  // see ActivationOffload's plan test
    const RunResult beside = train(c);
    EXPECT_EQ(beside.losses, plain.losses) << "lag " << lag << " keep casts " << keep;
    EXPECT_EQ(beside.memory.allocated_bytes.peak - before, p.peak_allocated - held_workspace)
        << "lag " << lag << " keep casts " << keep;
  }
}

}  // namespace
