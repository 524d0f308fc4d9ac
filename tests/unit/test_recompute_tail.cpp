// LEANTRAIN_RECOMPUTE_TAIL=1 (Note [Unread region output], src/autograd/unread_output.h): a
// checkpointed block's recomputation runs its MLP's last product (a LLaMA-family down_proj, a
// GPT-2 or ViT fc2) and last residual add dry. The losses and the trained weights are the same bits, the plan and the run's peaks do
// not move, the dry tails really run (counted), and only where the block is the region.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "autograd/unread_output.h"
#include "leantrain/device.h"
#include "knob_env.h"
#include "memory/host_allocators.h"
#include "leantrain/plan.h"
#include "train/recipe_table.h"
#include "train_test_util.h"

using namespace lt;
using lt::test::KnobEnv;
using lt::test::TempDir;
using lt::test::TrainerRun;

namespace {

struct Trained {
  std::vector<double> losses;
  std::vector<std::vector<uint8_t>> weights;
  long long dry_tails = 0;
  int64_t peak = 0, planned_peak = 0;
};

RunConfig llama_run(const TempDir& tmp, const std::string& checkpoint, bool fused) {
  RunConfig c = test::tiny_gpt(tmp.path);
  c.model = "llama-tiny";
  c.data = "synthetic";
  c.precision = Precision::MixedBf16;
  c.checkpoint = parse_checkpoint_flag(checkpoint);
  c.fused_step = fused;
  c.steps = 3;
  return c;
}

// New CPU blocks hold NaN while a run trains: a dry output that something reads for real (or a
// freed block's old values standing in for it) makes NaN losses or weights, not equal ones.
struct FillNewBlocks {
  FillNewBlocks() { set_cpu_fill_new_blocks(true); }
  ~FillNewBlocks() { set_cpu_fill_new_blocks(false); }
};

Trained train_run(const RunConfig& c) {
  FillNewBlocks fill;
  Trained t;
  t.planned_peak = plan_run(c, PlanOptions{"cpu"}).peak_allocated;
  const long long before_tails = detail::unread_tails_run();
  Allocator& al = allocator_for(Device::cpu());
  const int64_t before = al.stats().allocated_bytes.current;
  al.reset_peak_stats();
  {
    TrainerRun run(c);
    for (int i = 0; i < 3; ++i) t.losses.push_back(run->step().loss);
    for (const auto& [name, p] : run->model().named_parameters()) t.weights.push_back(test::bytes_of(p));
  }
  t.peak = al.stats().allocated_bytes.peak - before;
  t.dry_tails = detail::unread_tails_run() - before_tails;
  return t;
}

}  // namespace

TEST(RecomputeTail, SameBitsAndPeaksWithTheTailsDry) {
  TempDir tmp;
  for (bool fused : {false, true}) {
    const RunConfig c = llama_run(tmp, "blocks", fused);
    const std::string what = fused ? "fused step" : "plain step";
    const Trained plain = train_run(c);
    Trained dry;
    {
      KnobEnv on("LEANTRAIN_RECOMPUTE_TAIL", "1");
      dry = train_run(c);
    }
    EXPECT_EQ(plain.dry_tails, 0) << what;
    EXPECT_GT(dry.dry_tails, 0) << what;  // llama-tiny's blocks, once per block and step
    EXPECT_EQ(dry.losses, plain.losses) << what;
    EXPECT_EQ(dry.weights, plain.weights) << what;
    EXPECT_EQ(dry.planned_peak, plain.planned_peak) << what;
    EXPECT_EQ(dry.peak, plain.peak) << what;
  }
}

// GPT-2 and ViT blocks (LayerNorm, GELU MLP): fc2's product dry, with the lean saves (the
// norm folded into fc1) and without them (fc2 keeping the GELU's output), f32 and bf16-mixed.
TEST(RecomputeTail, GeluBlocksSameBitsAndPeaks) {
  TempDir tmp;
  for (const char* model : {"gpt2-tiny", "vit-tiny"})
    for (bool lean : {true, false})
      for (Precision precision : {Precision::True32, Precision::MixedBf16}) {
        RunConfig c = test::tiny_gpt(tmp.path);
        if (std::string(model) == "vit-tiny")
          c.model = model, c.data = "synthetic", c.dim = 0, c.depth = 0, c.heads = 0, c.seq_len = 0;
        c.precision = precision;
        c.lean_saves = lean;
        c.checkpoint = parse_checkpoint_flag("blocks");
        c.steps = 3;
        const std::string what = std::string(model) + (lean ? " lean" : " keep-saves") +
                                 (precision == Precision::True32 ? " f32" : " bf16-mixed");
        const Trained plain = train_run(c);
        Trained dry;
        {
          KnobEnv on("LEANTRAIN_RECOMPUTE_TAIL", "1");
          dry = train_run(c);
        }
        EXPECT_GT(dry.dry_tails, 0) << what;
        EXPECT_EQ(dry.losses, plain.losses) << what;
        EXPECT_EQ(dry.weights, plain.weights) << what;
        EXPECT_EQ(dry.planned_peak, plain.planned_peak) << what;
        EXPECT_EQ(dry.peak, plain.peak) << what;
      }
}

// The block must be the region: checkpointing only its MLP (whose output the block reads), or
// the selective policy (which replays kept products), runs no tail dry.
TEST(RecomputeTail, OnlyWhereTheBlockIsTheRegion) {
  TempDir tmp;
  for (const char* spec : {"selective", "model\\.layers\\.[0-9]+\\.mlp"}) {
    const RunConfig c = llama_run(tmp, spec, false);
    Trained t;
    {
      KnobEnv on("LEANTRAIN_RECOMPUTE_TAIL", "1");
      t = train_run(c);
    }
    EXPECT_EQ(t.dry_tails, 0) << spec;
    EXPECT_EQ(train_run(c).losses, t.losses) << spec;
  }
}

// On the GPU (the TinyLlama config's path): the checkpointed fused step, the same losses bit for
// bit and the plan's peaks, with the tails dry.
TEST(RecomputeTail, CudaSameLossesAndPlannedPeaks) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  TempDir tmp;
  RunConfig c = llama_run(tmp, "blocks", true);
  c.device = "cuda";
  c.attention_kernel = AttentionKernel::Cudnn;
  const RunResult plain = train(c);
  KnobEnv on("LEANTRAIN_RECOMPUTE_TAIL", "1");
  const PlanResult p = plan_run(c, PlanOptions{"cuda"});
  const long long before = detail::unread_tails_run();
  const int64_t held = allocator_for(Device::cuda(0)).stats().allocated_bytes.current;
  const RunResult dry = train(c);
  EXPECT_GT(detail::unread_tails_run() - before, 0);
  EXPECT_EQ(dry.losses, plain.losses);
  EXPECT_EQ(dry.memory.allocated_bytes.peak - held, p.peak_allocated);
}
