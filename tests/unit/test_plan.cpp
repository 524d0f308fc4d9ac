// leantrain plan: the dry-run's peaks against a real CPU run, the simulated CUDA allocator's
// rounding, the cuBLASLt workspace mirror, the cost model and the budget search.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include "dist/peer_all_reduce.h"
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

// A job of several GPUs adds NCCL's buffers per rank on their own line, like the context; the
// estimate can be replaced (--nccl-bytes). A CPU job has none.
TEST(Plan, SeveralCudaDevicesAddNcclBuffers) {
  RunConfig c = tiny_vit();
  c.devices = 2;
  c.strategy = StrategyKind::Ddp;
  c.batch = 4;
  PlanResult p = plan_run(c);
  // ddp adds the copy-engine all-reduce's two inboxes of 2 x 16 MiB and its 4 flags.
  const int64_t peer = 2 * 2 * 16 * MiB + 4 * 8;
  EXPECT_EQ(dist::peer_reduce_bytes(2), peer);
  EXPECT_EQ(p.nccl_bytes, kNcclBytes + peer);
  EXPECT_EQ(p.total_needed(), p.peak_reserved + p.context_bytes + kNcclBytes + peer);
  EXPECT_NE(plan_text(p).find("NCCL buffers (per rank)"), std::string::npos);
  c.strategy = StrategyKind::Fsdp;  // no all-reduce of buckets: NCCL's buffers only
  EXPECT_EQ(plan_run(c).nccl_bytes, kNcclBytes);
  c.strategy = StrategyKind::Zero1;
  ::setenv("LEANTRAIN_PEER_REDUCE", "0", 1);  // switched off: NCCL reduces every bucket
  EXPECT_EQ(dist::peer_reduce_bytes(2), 0);
  EXPECT_EQ(plan_run(c).nccl_bytes, kNcclBytes);
  ::unsetenv("LEANTRAIN_PEER_REDUCE");
  EXPECT_EQ(plan_run(c).nccl_bytes, kNcclBytes + peer);
  ::setenv("LEANTRAIN_PEER_CHUNK_MB", "2", 1);
  EXPECT_EQ(dist::peer_reduce_bytes(4), 2 * 4 * 2 * MiB + 8 * 8);
  ::unsetenv("LEANTRAIN_PEER_CHUNK_MB");
  PlanOptions o;
  o.nccl_bytes = 123 * MiB;
  EXPECT_EQ(plan_run(c, o).nccl_bytes, 123 * MiB);
  o.device_type = "cpu";
  EXPECT_EQ(plan_run(c, o).nccl_bytes, 0);
}

// fsdp: an untied embedding table and head are gathered around their own calls, not kept on
// every rank, so between steps each rank holds its own blocks' and the table's or head's bytes
// only. A chunked loss reads the head's weight directly: then the head stays on every rank.
TEST(Plan, FsdpKeepsAnUntiedTableAndHeadOnTheirOwnersOnly) {
  namespace fs = std::filesystem;
  const fs::path cfg_path = fs::temp_directory_path() / ("lt_test_plan_untied_" + std::to_string(::getpid()) + ".json");
  {
    std::ofstream f(cfg_path);
    f << R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 4096,
             "max_position_embeddings": 256, "tie_word_embeddings": false})";
  }
  RunConfig c;
  c.model_config = cfg_path.string();
  c.data = "synthetic";
  c.seq_len = 16;
  c.batch = 4;
  c.steps = 2;
  c.eval_batches = 1;
  c.device = "cpu";
  c.devices = 2;
  c.strategy = StrategyKind::Fsdp;
  const int64_t table = 4096 * 64 * 4;  // f32, as the head
  auto params_at_end = [&](int rank) {
    PlanOptions o;
    o.rank = rank;
    return plan_run(c, o).stats.category[size_t(Category::Parameter)].current;
  };
  // The table on one rank, the head on the other (and a few blocks' bytes).
  EXPECT_LT(params_at_end(0) + params_at_end(1), 2 * table + table / 2);
  for (int rank : {0, 1}) EXPECT_LT(params_at_end(rank), table + table / 2) << "rank " << rank;
  c.loss_chunk = 8;  // the head on both
  for (int rank : {0, 1}) EXPECT_GE(params_at_end(rank), table) << "rank " << rank << " with --loss-chunk";
  EXPECT_GE(params_at_end(0) + params_at_end(1), 3 * table);
  fs::remove(cfg_path);
}

// --gemm-workspace sizes the cuBLASLt workspace the plan mirrors: none at 0, exactly the bytes
// asked otherwise, and nothing else in the plan moves. The setting is per run, not sticky.
TEST(Plan, GemmWorkspaceIsPlannedAsAsked) {
  RunConfig c = tiny_vit();
  const PlanResult base = plan_run(c);
  c.gemm_workspace = 0;
  const PlanResult none = plan_run(c);
  EXPECT_EQ(none.workspace_bytes, 0);
  EXPECT_EQ(base.peak_allocated - none.peak_allocated, kCublasWorkspaceBytes);
  c.gemm_workspace = 4 * MiB;
  const PlanResult four = plan_run(c);
  EXPECT_EQ(four.workspace_bytes, 4 * MiB);
  EXPECT_EQ(four.peak_allocated - none.peak_allocated, 4 * MiB);
  EXPECT_NE(command_line(c).find("--gemm-workspace 4194304"), std::string::npos) << command_line(c);
  EXPECT_EQ(plan_run(tiny_vit()).peak_allocated, base.peak_allocated);
  c.gemm_workspace = -1;
  EXPECT_THROW(plan_run(c), UsageError);
  c.gemm_workspace = (int64_t(1) << 30) + 1;
  EXPECT_THROW(plan_run(c), UsageError);
}

TEST(Plan, SimulatedCudaReservesWholeSegments) {
  PlanResult p = plan_run(tiny_vit());
  EXPECT_GE(p.peak_reserved, p.peak_allocated);
  EXPECT_EQ(p.peak_reserved % (2 * MiB), 0);  // every segment is 2 MiB, 20 MiB or a 2 MiB multiple
  EXPECT_EQ(p.peak_allocated % 512, 0);
  EXPECT_EQ(p.workspace_bytes, kCublasWorkspaceBytes);
  EXPECT_EQ(p.total_needed(), p.peak_reserved + kCudaContextBytes + kCudaLibraryBytes);
  EXPECT_EQ(p.nccl_bytes, 0);  // one device: no NCCL
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
  // Past 1 PiB (or past what a double holds) is an error, not a wrapped, negative budget.
  EXPECT_EQ(parse_bytes("1048576GiB", "--budget"), int64_t(1) << 50);
  for (const char* v : {"1e300", "1e308TiB", "1048577GiB", "9223372036854775808"}) {
    try {
      parse_bytes(v, "--fit");
      ADD_FAILURE() << v;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("--fit ") + v + " is out of range"), std::string::npos) << e.what();
    }
  }
}

TEST(Plan, CommandLineKeepsNumbersExact) {
  RunConfig c;
  c.seed = 12345678901234567;  // not representable as a double
  c.steps = 1234567;           // 6 significant digits would print 1.23457e+06
  c.lr = 0.1;
  c.eps = 1.2345678e-9;
  const std::string cmd = command_line(c);
  for (const char* part : {" --seed 12345678901234567", " --steps 1234567", " --lr 0.1", " --eps 1.2345678e-09"})
    EXPECT_NE(cmd.find(part), std::string::npos) << part << " in " << cmd;
}

// A sparse MoE block's forward FLOPs: the router and the k experts each token meets (its
// weights are stacked 3-D tensors, which the per-parameter count does not see).
TEST(Plan, ProfileCountsTheExpertsAMoeTokenMeets) {
  RunConfig c = tiny_vit();
  c.model = "qwen3-moe-tiny";  // hidden 32, 8 experts of 24, 2 a token; layer 1 dense
  c.seq_len = 16;
  const CheckpointProfile m = profile_model(c, false);
  ASSERT_TRUE(m.module_flops.count("model.layers.0.mlp")) << "no MoE block among the profiled modules";
  EXPECT_DOUBLE_EQ(m.module_flops.at("model.layers.0.mlp"), 2.0 * 16 * 32 * (8 + 3 * 2 * 24));
}

TEST(Plan, CostModelOrdersTheKnobs) {
  RunConfig b = tiny_vit();
  b.batch = 64;
  const CheckpointProfile m = profile_model(b, false);
  EXPECT_GT(m.forward_flops, 0);
  auto t = [&](const RunConfig& c, double recompute = 0) {
    return predict_step_cost(c, m, recompute, b).cost() / predict_step_cost(b, m, 0, b).seconds();
  };
  EXPECT_DOUBLE_EQ(t(b), 1.0);
  RunConfig mb = b, bf = b, st = b, q = b, fu = b;
  mb.micro_batch = 1;
  bf.precision = Precision::MixedBf16;
  st.state_dtype = StateDtype::Bf16;
  q.optimizer = OptimizerKind::AdamW8bit;
  fu.fused_step = true;
  EXPECT_GT(t(b, m.forward_flops / 3), 1.0);  // recomputing a third of the forward
  EXPECT_GT(t(b, m.forward_flops / 3), t(b, m.forward_flops / 6));
  EXPECT_GT(t(mb), 1.0);
  EXPECT_LT(t(bf), 1.0);
  EXPECT_GT(t(st), 1.0);  // a leaner state is never cheaper: its penalty outweighs any time it saves
  EXPECT_GT(t(q), 1.0);
  EXPECT_GT(t(q), t(st));
  EXPECT_GT(t(fu), 1.0);
  const StepCost s = predict_step_cost(q, m, 0, b);
  EXPECT_GT(s.penalty, 0);
  EXPECT_GT(s.seconds(), 0);
}

// The ViT's block modules differ (norms, attention, its core, the MLP and their Linears): the
// order puts the most bytes saved per recompute FLOP first, and every prefix is a --checkpoint
// value the run accepts.
TEST(Plan, CheckpointOrderIsByBytesSavedPerFlop) {
  RunConfig c = tiny_vit();
  const CheckpointProfile p = profile_model(c);
  ASSERT_EQ(p.blocks.size(), 4u);  // vit-tiny: 4 identical blocks, one measured
  ASSERT_FALSE(p.order.empty());
  EXPECT_LT(p.measurements, 30) << "identical blocks share one measurement";
  std::set<std::string> kinds;
  double best = 0;
  for (const CheckpointUnit& u : p.order) {
    kinds.insert(u.rel);
    EXPECT_GT(u.saved_bytes, 0) << u.path;
    EXPECT_GT(u.flops, 0) << u.path;
    best = std::max(best, double(u.saved_bytes) / u.flops);
  }
  EXPECT_DOUBLE_EQ(double(p.order[0].saved_bytes) / p.order[0].flops, best);
  // The modules differ in bytes per FLOP: the first kind is strictly better than the last. The
  // blocks fold their norms and GELU into the linears (recomputed in the backward already), so
  // a part of a block may save nothing and the order may hold whole blocks alone.
  const CheckpointUnit& last = p.order.back();
  if (kinds.size() > 1)
    EXPECT_GT(double(p.order[0].saved_bytes) / p.order[0].flops, double(last.saved_bytes) / last.flops);
  // The same module of every block in a row, block 0 first.
  for (size_t i = 0; i < p.blocks.size(); ++i) EXPECT_EQ(p.order[i].block, p.blocks[i]);
  // FLOPs from op shapes: a block is at least the sum of its children; the model more than its blocks.
  double blocks = 0;
  for (const std::string& b : p.blocks) blocks += p.module_flops.at(b);
  EXPECT_GT(p.forward_flops, blocks);
  EXPECT_FALSE(p.spec(0).on());
  // Each prefix is a runnable --checkpoint: the plan accepts it, and the predicted activation
  // peak falls (or stays) as more is checkpointed.
  int64_t prev = std::numeric_limits<int64_t>::max();
  for (size_t k : {size_t(0), p.order.size() / 2, p.order.size()}) {
    RunConfig ck = c;
    ck.batch = 64;
    ck.checkpoint = p.spec(k);
    PlanResult r = plan_run(ck, PlanOptions{"cpu"});
    EXPECT_LE(r.peak_allocated, prev) << ck.checkpoint.text;
    prev = r.peak_allocated;
    if (k == p.order.size() && kinds.size() > 1)
      EXPECT_NE(ck.checkpoint.text.find("encoder"), std::string::npos) << ck.checkpoint.text;
    if (k == p.order.size() && kinds.size() == 1) EXPECT_EQ(ck.checkpoint, nn::CheckpointSpec::blocks());
  }
  // Checkpointing the first unit in every block frees what the profile measured, per sample.
  RunConfig none = c, first = c;
  none.batch = first.batch = 1;
  first.checkpoint = p.spec(p.blocks.size());
  const int64_t act0 = plan_run(none, PlanOptions{"cpu"}).stats.category[int(Category::Activation)].peak;
  const int64_t act1 = plan_run(first, PlanOptions{"cpu"}).stats.category[int(Category::Activation)].peak;
  EXPECT_GT(act0, act1);
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
  EXPECT_EQ(loose.plans, 1);  // the cheapest candidate fits: nothing costlier is planned
  EXPECT_EQ(l.config.optimizer, OptimizerKind::AdamW);
  EXPECT_EQ(l.config.state_dtype, StateDtype::Auto);  // state precision only when needed
  EXPECT_EQ(l.units, 0u);
  // A budget equal to the need fits.
  EXPECT_EQ(fit_budget(b, l.total_needed, o).plans, 1);
  // Tight: one byte under the generous choice's need forces a leaner, costlier config.
  FitResult tight = fit_budget(b, l.total_needed - 1, o);
  ASSERT_GE(tight.chosen, 0);
  const FitCandidate& t = tight.candidates[size_t(tight.chosen)];
  EXPECT_TRUE(t.fits);
  EXPECT_LE(t.total_needed, l.total_needed - 1);
  EXPECT_GT(t.cost, l.cost);
  // The chosen config, planned again on its own, fits: the search reports exact needs.
  RunConfig again = t.config;
  EXPECT_EQ(plan_run(again, o).total_needed(), t.total_needed);
  EXPECT_EQ(fit_budget(b, t.total_needed, o).candidates[0].config.precision, tight.candidates[0].config.precision);
  const std::string table = fit_table(tight);
  for (const char* col : {"allocated", "reserved", "need", "fits", "time", "recompute", "<- chosen"})
    EXPECT_NE(table.find(col), std::string::npos) << col << "\n" << table;
  const std::string json = fit_json(tight);
  EXPECT_NE(json.find("\"chosen\": true"), std::string::npos) << json;
  EXPECT_NE(json.find("\"checkpoint_order\": [{"), std::string::npos) << json;
  const std::string cmd = command_line(t.config);
  EXPECT_EQ(cmd.rfind("leantrain train --model vit-tiny", 0), 0u) << cmd;
  EXPECT_NE(cmd.find("--batch 256"), std::string::npos) << cmd;
  // Impossible: every cuda plan reserves the 32 MiB workspace and at least one 2 MiB segment.
  // (Batch 8, so the search stays quick.) The need rounds to the budget's figure, so the message
  // gives both in bytes.
  const int64_t floor = kCublasWorkspaceBytes + 2 * MiB;
  try {
    fit_budget(tiny_vit(), floor - 1, o);
    FAIL() << "a budget under the workspace and one segment fits nothing";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    EXPECT_NE(m.find("no configuration fits in " + format_bytes(floor - 1) + " (" + std::to_string(floor - 1) + " B)"),
              std::string::npos) << m;
    EXPECT_NE(m.find("the closest candidate needs " + format_bytes(floor) + " (" + std::to_string(floor) + " B)"),
              std::string::npos) << m;
    EXPECT_NE(m.find("micro-batch "), std::string::npos) << m;  // the closest candidate's config
  }
}

// `selective` is a candidate of its own whenever nothing-checkpointed does not fit: it is planned
// (its need exact, its cost a share of the blocks' recompute), labelled, and the search still
// returns the cheapest fitting candidate it planned.
TEST(Plan, BudgetSearchWeighsSelective) {
  RunConfig b = tiny_vit();
  b.batch = 256;
  b.precision = Precision::TrueBf16;
  const PlanOptions cpu{"cpu"};
  RunConfig sel = b;
  sel.checkpoint = nn::CheckpointSpec::selective();
  const int64_t none_need = plan_run(b, cpu).total_needed(), sel_need = plan_run(sel, cpu).total_needed();
  // The blocks recompute their norms and GELU without checkpointing, so selective (which keeps
  // the projections' outputs) may need more than nothing checkpointed: a budget below both.
  const int64_t budget = std::min(sel_need, none_need - 1);
  FitResult f = fit_budget(b, budget, cpu);
  ASSERT_GE(f.chosen, 0);
  const FitCandidate& chosen = f.candidates[size_t(f.chosen)];
  const FitCandidate* s = nullptr;
  for (const FitCandidate& c : f.candidates)
    if (c.config.checkpoint.mode == nn::CheckpointSpec::Mode::Selective && c.config.precision == Precision::TrueBf16 && c.config.micro_batch == 0 &&
        c.config.optimizer == OptimizerKind::AdamW && c.config.state_dtype == StateDtype::Auto && !c.config.fused_step)
      s = &c;
  ASSERT_NE(s, nullptr) << fit_table(f);
  EXPECT_TRUE(s->planned) << fit_table(f);
  EXPECT_EQ(s->fits, sel_need <= budget) << fit_table(f);
  EXPECT_EQ(s->total_needed, sel_need);
  EXPECT_EQ(s->units, 0u);
  EXPECT_GT(s->recompute_flops, 0);
  EXPECT_NE(fit_table(f).find("selective"), std::string::npos);
  if (s->fits) EXPECT_LE(chosen.cost, s->cost);
  for (const FitCandidate& c : f.candidates)
    if (c.planned && c.fits) EXPECT_LE(chosen.cost, c.cost) << fit_table(f);
}

// --devices N makes the device count and the strategy knobs: with room to spare one device is the
// fewest device-seconds; kept to N devices (train --fit's job), a strategy is chosen whose need is
// its largest rank's, each rank planned.
TEST(Plan, BudgetSearchWeighsDevicesAndStrategies) {
  RunConfig b = tiny_vit();
  b.devices = 2;
  PlanOptions o{"cpu"};
  FitResult loose = fit_budget(b, int64_t(1) << 40, o);
  ASSERT_GE(loose.chosen, 0);
  EXPECT_EQ(loose.candidates[size_t(loose.chosen)].config.devices, 1) << fit_table(loose);
  o.fewer_devices = false;
  FitResult all = fit_budget(b, int64_t(1) << 40, o);
  ASSERT_GE(all.chosen, 0);
  const FitCandidate& k = all.candidates[size_t(all.chosen)];
  EXPECT_EQ(k.config.devices, 2) << fit_table(all);
  for (const FitCandidate& c : all.candidates) EXPECT_EQ(c.config.devices, 2);
  int64_t largest = 0;
  int worst = 0;
  for (int rank = 0; rank < 2; ++rank) {
    PlanOptions ro = o;
    ro.rank = rank;
    const int64_t need = plan_run(k.config, ro).total_needed();
    if (need > largest) largest = need, worst = rank;
  }
  EXPECT_EQ(k.total_needed, largest);
  if (k.config.strategy != StrategyKind::Ddp) EXPECT_EQ(k.worst_rank, worst);
  const std::string cmd = command_line(k.config);
  EXPECT_NE(cmd.find("--devices 2 --strategy " + name_of(k.config.strategy)), std::string::npos) << cmd;
  EXPECT_NE(fit_table(all).find("gpus/strategy"), std::string::npos);
  EXPECT_NE(fit_json(all).find("\"devices\": 2"), std::string::npos);
  // Every rank of a run on more GPUs does less work: on a batch whose halves still make large
  // GEMMs its step is faster, its device-seconds more.
  const CheckpointProfile m = profile_model(b);
  RunConfig two = b;
  two.batch = 1024;
  RunConfig one = two;
  one.devices = 1;
  const StepCost s1 = predict_step_cost(one, m, 0, one), s2 = predict_step_cost(two, m, 0, one);
  EXPECT_LT(s2.seconds(), s1.seconds());
  EXPECT_GT(s2.cost(), s1.cost());
  EXPECT_GT(s2.communication, 0);
}

// Optimizer-state precision is a last resort: a budget that the user's state can meet keeps it;
// one byte less than the leanest config with the user's state takes the 8-bit variant.
TEST(Plan, StatePrecisionOnlyWhenNeeded) {
  RunConfig b = tiny_vit();
  b.batch = 1;  // activations small, so parameters, gradients and state dominate
  b.precision = Precision::TrueBf16;
  const PlanOptions cpu{"cpu"};  // exact bytes, no segments or context
  FitResult g = fit_budget(b, int64_t(1) << 40, cpu);
  const FitCandidate& gc = g.candidates[size_t(g.chosen)];
  EXPECT_EQ(gc.config.optimizer, OptimizerKind::AdamW);
  EXPECT_EQ(gc.config.state_dtype, StateDtype::Auto);
  // The leanest need with the user's AdamW state: fused step, each checkpoint prefix, with and
  // without --offload-activations.
  const CheckpointProfile p = profile_model(b);
  int64_t lean = std::numeric_limits<int64_t>::max();
  for (size_t k = 0; k <= p.order.size(); ++k)
    for (bool offload : {false, true}) {
      if (offload && k == 0) continue;
      RunConfig c = b;
      c.fused_step = true;
      c.checkpoint = p.spec(k);
      c.offload_activations = offload;
      lean = std::min(lean, plan_run(c, cpu).total_needed());
    }
  FitResult t = fit_budget(b, lean - 1, cpu);
  ASSERT_GE(t.chosen, 0);
  const FitCandidate& tc = t.candidates[size_t(t.chosen)];
  EXPECT_EQ(tc.config.optimizer, OptimizerKind::AdamW8bit) << command_line(tc.config);
  EXPECT_EQ(tc.state, "8-bit");
  EXPECT_LE(tc.total_needed, lean - 1);
  EXPECT_EQ(plan_run(tc.config, cpu).total_needed(), tc.total_needed);
  EXPECT_NE(fit_table(t).find("8-bit"), std::string::npos);
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

// A model with batch norm cannot train on one sample when its last stage is 1 x 1 (resnet-tiny on
// 28 x 28): the profile probes two samples and reports per-sample figures, and the budget search
// never proposes a micro-batch of one.
TEST(Plan, BatchNormModelsProbeTwoSamplesAndKeepMicroBatchesOfTwo) {
  RunConfig c = tiny_vit();
  c.model = "resnet-tiny";
  c.batch = 8;
  const CheckpointProfile p = profile_model(c, true);
  EXPECT_EQ(p.min_micro_batch, 2);
  EXPECT_GT(p.forward_flops, 0);
  EXPECT_EQ(profile_model(tiny_vit(), false).min_micro_batch, 1);
  PlanOptions o;
  o.context_bytes = 0;
  const FitResult f = fit_budget(c, 1024 * MiB, o);
  ASSERT_GE(f.chosen, 0);
  for (const FitCandidate& cand : f.candidates)
    EXPECT_NE(cand.config.micro_batch, 1) << command_line(cand.config);
}
