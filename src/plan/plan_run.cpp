// plan_run: the run of lt::train (run.cpp) replayed on the meta device. Same task, same Trainer,
// same steps and evaluation, so every allocation a GPU run makes is made here, in the same
// order; only the allocator differs (the CUDA caching policy over fake segments). The peak's
// phase comes from comparing the peak after each phase, its breakdown from the history.
#include <algorithm>
#include <chrono>
#include <set>

#include "dist/peer_all_reduce.h"
#include "leantrain/cuda_info.h"
#include "leantrain/memory_snapshot.h"
#include "leantrain/ops.h"
#include "leantrain/plan.h"
#include "memory/caching_policy.h"
#include "memory/host_allocators.h"
#include "plan/memory_report_html.h"
#include "train/assemble.h"

namespace lt {

namespace {

// The most steps a dry run makes while waiting for the allocator's layout to repeat.
constexpr int64_t kMaxPlanSteps = 64;

// Allocated bytes by category at the moment allocated bytes were highest, replayed from the history.
std::array<int64_t, kNumCategories> breakdown_at_peak(const std::vector<MemoryEvent>& h) {
  std::array<int64_t, kNumCategories> cur{}, best{};
  int64_t total = 0, peak = -1;
  for (const MemoryEvent& e : h) {
    using A = MemoryEvent::Action;
    if (e.action == A::Alloc) {
      cur[int(e.category)] += e.size;
      total += e.size;
      if (total > peak) peak = total, best = cur;
    } else if (e.action == A::Free) {
      cur[int(e.category)] -= e.size;
      total -= e.size;
    } else if (e.action == A::Retag) {
      cur[int(e.from)] -= e.size;
      cur[int(e.category)] += e.size;
    }
  }
  return best;
}

}  // namespace

PlanResult plan_run(const RunConfig& cfg_in, const PlanOptions& opt) {
  auto t0 = std::chrono::steady_clock::now();
  if (opt.device_type != "cuda" && opt.device_type != "cpu")
    throw UsageError("--device-type " + opt.device_type, "a plan targets a cuda or a cpu run",
                     "pass --device-type cuda or --device-type cpu");
  RunConfig cfg = cfg_in;
  cfg.device = "cpu";  // validated as a run that could start here; the plan itself runs on meta
  cfg.resume.clear();
  cfg.save.clear();
  cfg.metrics.clear();
  validate(cfg);
  set_gemm_workspace_bytes(cfg.gemm_workspace);
  set_attention_kernel(cfg.attention_kernel);
  const bool cuda = opt.device_type == "cuda";

  PlanResult r;
  r.config = cfg_in;
  r.device_type = opt.device_type;
  r.context_bytes = opt.context_bytes >= 0 ? opt.context_bytes : cuda ? kCudaContextBytes + kCudaLibraryBytes : 0;
  // NCCL's own buffers, and under ddp / zero1 the copy-engine all-reduce's inboxes (src/dist/peer_all_reduce.h).
  const int64_t peer_bytes = cfg.strategy == StrategyKind::Ddp || cfg.strategy == StrategyKind::Zero1 ? dist::peer_reduce_bytes(int(cfg.devices)) : 0;
  r.nccl_bytes = !cuda || cfg.devices < 2 ? 0 : opt.nccl_bytes >= 0 ? opt.nccl_bytes : kNcclBytes + peer_bytes;
  // --devices N: this is one rank of N under --strategy, with a communicator that moves nothing.
  struct World {
    explicit World(int n, int rank) {
      if (n > 1) dist::set_world(dist::make_meta_communicator(n, rank));
    }
    ~World() { dist::set_world(nullptr); }
  } world(int(cfg.devices), opt.rank);
  MetaAllocatorScope swap(cuda);
  Allocator& al = allocator_for(Device::meta());
  al.set_history_max_entries(size_t(1) << 24);
  al.set_history(true);
  {
    const Device meta = Device::meta();
    AssembledRun run = assemble_run(cfg, meta);  // the run's own assembly (train/assemble.h)
    Task* task = run.task.get();
    Trainer& trainer = *run.trainer;
    r.description = task->description + (task->lora_note.empty() ? "" : "\n" + task->lora_note);
    r.parameters = task->model->num_parameters();
    const int64_t total = trainer.total_steps();
    int64_t best = al.stats().allocated_bytes.peak;
    r.peak_phase = "model build";
    auto note = [&](const std::string& phase) {
      int64_t p = al.stats().allocated_bytes.peak;
      if (p > best) best = p, r.peak_phase = phase;
    };
    // The caching allocator's layout can take a few steps to settle (a block handed out whole
    // where a split would leave too little: the sizes it rounds to vary step to step), and a
    // later step may peak a few hundred KiB higher than the second. So the dry run goes on past
    // opt.steps until the layout at a step's end repeats one seen at an earlier step's end (from
    // then on every step repeats one already planned), or the run's last step, or kMaxPlanSteps.
    const int64_t last = cfg.stop_at > 0 ? std::min(cfg.stop_at, total) : total;
    const int64_t at_least = std::min<int64_t>(opt.steps, last);
    CachingAllocator* caching = as_caching(al);
    std::set<uint64_t> layouts;
    bool settled = caching == nullptr;  // no caching allocator: nothing to settle
    trainer.start();
    while (trainer.steps_done() < last && (trainer.steps_done() < at_least || (!settled && trainer.steps_done() < kMaxPlanSteps))) {
      trainer.step();
      note("step " + std::to_string(trainer.steps_done()));
      // Evaluations the run makes on the way (--eval-every), as run.cpp schedules them.
      const bool evaluates = cfg.eval_every > 0 && trainer.steps_done() % cfg.eval_every == 0 && trainer.steps_done() < last;
      if (evaluates) {
        trainer.evaluate();
        note("evaluation");
      }
      // With evaluations on the way the period spans them too: compare at their boundaries only.
      if (caching && (cfg.eval_every <= 0 || evaluates)) settled = !layouts.insert(caching->layout_fingerprint()).second;
    }
    r.steps = trainer.steps_done();
    // The same files a run writes, at the same moments (run.cpp, app.cpp), from the predicted trace.
    if (opt.write_memory_files && !cfg.memory_snapshot.empty()) {
      write_memory_snapshot(al, cfg.memory_snapshot);
      write_memory_snapshot_pickle(al, pickle_path_for(cfg.memory_snapshot));
    }
    trainer.evaluate();  // every run evaluates at its end
    r.evaluates = true;
    note("evaluation");
    if (opt.write_memory_files && !cfg.memory_report.empty())
      write_memory_report_html(al, cfg.memory_report, "leantrain plan " + cfg.model + " (predicted, " + opt.device_type + ")");
    r.stats = al.stats();
    r.pinned_host = pinned_host_allocator(meta).stats();
    r.disk = disk_allocator(meta).stats();
    r.at_peak = breakdown_at_peak(al.history());
    for (const LiveBlock& b : al.live_blocks())
      if (b.category == Category::Workspace && std::string(b.op) == "cublaslt_workspace") r.workspace_bytes += b.size;
  }
  al.set_history(false);
  al.clear_history();
  r.peak_allocated = r.stats.allocated_bytes.peak;
  r.peak_reserved = r.stats.reserved_bytes.peak;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace lt
