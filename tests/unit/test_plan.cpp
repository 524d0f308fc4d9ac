// leantrain plan: the dry-run's peaks against a real CPU run, the simulated CUDA allocator's
// rounding, the cuBLASLt workspace mirror, the cost model and the budget search.
#include <gtest/gtest.h>

#include "leantrain/cuda_info.h"
#include "leantrain/ops.h"
#include "leantrain/plan.h"
#include "memory/host_allocators.h"

using namespace lt;

namespace {

constexpr int64_t MiB = int64_t(1) << 20;

RunConfig tiny_vit() {
  RunConfig c;
  c.model = "vit-tiny";  // 28x28x1, patch 7
  c.data = "synthetic";
  c.batch = 8;
  c.steps = 2;
  c.eval_batches = 1;
  c.device = "cpu";
  return c;
}

TEST(Plan, CpuPlanEqualsTheCpuRunsPeak) {
  RunConfig c = tiny_vit();
  PlanResult p = plan_run(c, PlanOptions{"cpu"});
  Allocator& cpu = allocator_for(Device::cpu());
  const int64_t before = cpu.stats().allocated_bytes.current;
  RunResult r = train(c);
  // The run resets the peak at its start, so its growth above what the process already held is the run's.
  EXPECT_EQ(r.memory.allocated_bytes.peak - before, p.peak_allocated);
  EXPECT_EQ(p.peak_reserved, p.peak_allocated);  // no caching on cpu
  EXPECT_EQ(p.workspace_bytes, 0);
  EXPECT_EQ(p.context_bytes, 0);
}

TEST(Plan, SimulatedCudaReservesWholeSegments) {
  PlanResult p = plan_run(tiny_vit());
  EXPECT_GE(p.peak_reserved, p.peak_allocated);
  EXPECT_EQ(p.peak_reserved % (2 * MiB), 0);  // every segment is 2 MiB, 20 MiB or a 2 MiB multiple
  EXPECT_EQ(p.peak_allocated % 512, 0);
  EXPECT_EQ(p.workspace_bytes, kCublasWorkspaceBytes);
  EXPECT_EQ(p.total_needed(), p.peak_reserved + kCudaContextBytes + kCudaLibraryBytes);
  int64_t sum = 0;
  for (int64_t v : p.at_peak) sum += v;
  EXPECT_EQ(sum, p.peak_allocated);
  EXPECT_GE(p.stats.category[int(Category::OptimizerState)].current, 0);
  // The same plan twice gives the same bytes: nothing depends on timing.
  PlanResult q = plan_run(tiny_vit());
  EXPECT_EQ(q.peak_reserved, p.peak_reserved);
  EXPECT_EQ(q.peak_allocated, p.peak_allocated);
}

TEST(Plan, WorkspaceMirrorIsAllocatedOnceAtTheFirstGemm) {
  set_allocator(Device::meta(), make_simulated_cuda_allocator());
  auto& sim = dynamic_cast<SimulatedCudaAllocator&>(allocator_for(Device::meta()));
  sim.set_history(true);
  {
    Tensor a = empty({4, 8}, DType::F32, Device::meta());
    Tensor b = empty({8, 4}, DType::F32, Device::meta());
    EXPECT_FALSE(sim.has_gemm_workspace());
    Tensor c1 = matmul(a, b);
    Tensor c2 = matmul(a, b);
  }
  int count = 0;
  for (const MemoryEvent& e : sim.history())
    if (e.action == MemoryEvent::Action::Alloc && e.category == Category::Workspace) {
      ++count;
      EXPECT_EQ(e.size, kCublasWorkspaceBytes);
    }
  EXPECT_EQ(count, 1);
  EXPECT_EQ(sim.stats().category[int(Category::Workspace)].current, kCublasWorkspaceBytes);
  sim.release_gemm_workspace();
  set_allocator(Device::meta(), std::make_unique<MetaAllocator>());
  {  // the plain meta allocator (the CPU's trace) takes no workspace
    Tensor a = empty({4, 8}, DType::F32, Device::meta());
    Tensor c = matmul(a, empty({8, 4}, DType::F32, Device::meta()));
    EXPECT_EQ(allocator_for(Device::meta()).stats().category[int(Category::Workspace)].current, 0);
  }
}

TEST(Plan, ParseBytes) {
  EXPECT_EQ(parse_bytes("8GiB", "--budget"), 8 * 1024 * MiB);
  EXPECT_EQ(parse_bytes("8GB", "--budget"), 8000000000);
  EXPECT_EQ(parse_bytes("1.5 M", "--budget"), 3 * MiB / 2);
  EXPECT_EQ(parse_bytes("4096", "--budget"), 4096);
  EXPECT_THROW(parse_bytes("8XB", "--budget"), UsageError);
  EXPECT_THROW(parse_bytes("-1G", "--budget"), UsageError);
}

TEST(Plan, CostModelOrdersTheKnobs) {
  RunConfig b = tiny_vit();
  EXPECT_DOUBLE_EQ(relative_step_cost(b, b), 1.0);
  RunConfig ck = b, mb = b, bf = b;
  ck.checkpoint = "blocks";
  mb.micro_batch = 1;
  bf.precision = "bf16-mixed";
  EXPECT_GT(relative_step_cost(ck, b), 1.0);
  EXPECT_GT(relative_step_cost(mb, b), 1.0);
  EXPECT_LT(relative_step_cost(bf, b), 1.0);
}

TEST(Plan, BudgetSearchTradesComputeForMemory) {
  // Batch 256: the activations span tens of MiB, so micro-batching and checkpointing change the
  // need by many 2 MiB segments (at batch 8 every candidate reserves the same 34 MiB: one small
  // segment and the cuBLASLt workspace, and no budget can tell them apart).
  RunConfig b = tiny_vit();
  b.batch = 256;
  PlanOptions o;
  o.context_bytes = 0;  // budgets in allocator bytes only, to keep them small
  FitResult loose = fit_budget(b, 1024 * MiB, o);
  ASSERT_GE(loose.chosen, 0);
  const FitCandidate& l = loose.candidates[size_t(loose.chosen)];
  EXPECT_EQ(loose.chosen, 0);  // the cheapest candidate fits: nothing costlier is planned
  for (size_t i = 1; i < loose.candidates.size(); ++i) EXPECT_FALSE(loose.candidates[i].planned) << i;
  // A budget equal to the need fits.
  EXPECT_EQ(fit_budget(b, l.total_needed, o).chosen, 0);
  // Tight: one byte under the generous choice's need forces a leaner, costlier config.
  FitResult tight = fit_budget(b, l.total_needed - 1, o);
  ASSERT_GT(tight.chosen, 0);
  const FitCandidate& t = tight.candidates[size_t(tight.chosen)];
  EXPECT_TRUE(t.fits);
  EXPECT_LE(t.total_needed, l.total_needed - 1);
  EXPECT_GE(l.total_needed - t.total_needed, 4 * 2 * MiB) << "the candidates should differ by several segments";
  EXPECT_GT(t.cost, l.cost);
  EXPECT_FALSE(tight.candidates[0].fits);
  EXPECT_EQ(fit_budget(b, t.total_needed, o).chosen, tight.chosen);  // exactly its need: the same choice
  EXPECT_NE(fit_table(tight).find("<- chosen"), std::string::npos);
  const std::string cmd = command_line(t.config);
  EXPECT_EQ(cmd.rfind("leantrain train --model vit-tiny", 0), 0u) << cmd;
  EXPECT_NE(cmd.find("--batch 256"), std::string::npos) << cmd;
  // Impossible: every cuda plan reserves the 32 MiB workspace and at least one 2 MiB segment.
  // (Batch 8, so the search that plans every candidate stays quick.) The need rounds to the
  // budget's figure, so the message gives both in bytes.
  const int64_t floor = kCublasWorkspaceBytes + 2 * MiB;
  try {
    fit_budget(tiny_vit(), floor - 1, o);
    FAIL() << "a budget under the workspace and one segment fits nothing";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("no configuration fits in " + format_bytes(floor - 1) + " (" + std::to_string(floor - 1) + " B)"),
              std::string::npos) << m;
    EXPECT_NE(m.find("the smallest candidate needs " + format_bytes(floor) + " (" + std::to_string(floor) + " B)"),
              std::string::npos) << m;
  }
}

TEST(Plan, OomGuidanceNamesTheCategoryAndThePlan) {
  RunConfig c = tiny_vit();
  Allocator& cpu = allocator_for(Device::cpu());
  cpu.set_limit(cpu.stats().reserved_bytes.current + 64 * 1024);  // room for less than the model's step
  std::string msg;
  try {
    train(c);
  } catch (const OutOfMemoryError& e) {
    msg = oom_guidance(c, e);
  }
  cpu.set_limit(-1);
  ASSERT_FALSE(msg.empty()) << "the run did not run out of memory";
  EXPECT_NE(msg.find("grew most: "), std::string::npos) << msg;
  EXPECT_NE(msg.find("predicted need"), std::string::npos) << msg;
  EXPECT_NE(msg.find("leantrain plan --model vit-tiny --data synthetic"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--budget"), std::string::npos) << msg;
}

TEST(Plan, BadDeviceTypeIsAUsageError) {
  EXPECT_THROW(plan_run(tiny_vit(), PlanOptions{"tpu"}), UsageError);
}

}  // namespace
