// `leantrain plan`: know a run's GPU memory before launching it. The run's real code (model
// build, training steps, evaluation) executes on the meta device, whose allocator runs the CUDA
// caching policy over fake addresses, so the peaks it reports are the ones a GPU run measures.
// docs/memory-model.md explains the model, what it covers and what lies outside it.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "leantrain/memory.h"
#include "leantrain/train.h"

namespace lt {

// Measured on the H200 of the GPU machine: the CUDA context, then the compute stream and the
// cuBLASLt handle. Outside the allocator, so added on their own line.
inline constexpr int64_t kCudaContextBytes = int64_t(527) << 20;
inline constexpr int64_t kCudaLibraryBytes = int64_t(2) << 20;
// NCCL's own device buffers per rank of a job of several GPUs (its channels' send/receive
// buffers, proxy state), outside the allocator: measured on two H200s over NVLink with NCCL's
// defaults (bench/results/dist-h200x4-0027b22.md). NCCL sizes them at run time from the topology
// and its environment (NCCL_BUFFSIZE, NCCL_MAX_NCHANNELS), so this is an estimate, like the context.
inline constexpr int64_t kNcclBytes = int64_t(860) << 20;

struct PlanOptions {
  std::string device_type = "cuda";  // cuda: simulated caching allocator; cpu: reserved == allocated
  int64_t steps = 2;                 // optimizer steps dry-run (capped by --steps when that is smaller)
  int64_t context_bytes = -1;        // -1: kCudaContextBytes + kCudaLibraryBytes on cuda, 0 on cpu
  int64_t nccl_bytes = -1;           // -1: kNcclBytes for a cuda job of 2+ devices, else 0
  // Write the config's --memory-snapshot / --memory-report from the dry run (the predicted
  // timeline). Off for the budget search's many candidate runs.
  bool write_memory_files = false;
  // With --devices N (2+): the rank whose memory is replayed (under --strategy).
  int rank = 0;
  // fit_budget with --devices N: also try fewer devices (1, 2, 4, ... below N). `train --fit`
  // turns it off: its job's world is already launched.
  bool fewer_devices = true;
};

struct PlanResult {
  RunConfig config;
  std::string device_type;
  std::string description;   // the task's one-line model description
  int64_t parameters = 0;
  int64_t steps = 0;         // optimizer steps planned
  bool evaluates = false;
  MemoryStats stats;         // the simulated allocator at the end, the model still alive
  MemoryStats pinned_host;   // meta's pinned-host account (the loaders' staging rings), same moment
  MemoryStats disk;          // meta's disk account (--offload-dir's state file), same moment
  int64_t peak_allocated = 0, peak_reserved = 0;
  std::string peak_phase;    // "model build", "step 1", "step 2", "evaluation"
  std::array<int64_t, kNumCategories> at_peak{};  // allocated bytes by category at the peak
  int64_t workspace_bytes = 0;  // the cuBLASLt workspace mirror (0 when no GEMM ran, or on cpu)
  int64_t context_bytes = 0;
  int64_t nccl_bytes = 0;  // NCCL's buffers per rank (cuda, --devices 2+)
  int64_t total_needed() const { return peak_reserved + context_bytes + nccl_bytes; }
  double seconds = 0;        // how long the plan took
  // The cost model's prediction for this config (set by add_cost_prediction; 0 when not run).
  double predicted_step_seconds = 0, forward_flops = 0, recompute_flops = 0;
};

// Dry-runs `cfg` on meta. Throws UsageError for bad flags, as `train` would.
PlanResult plan_run(const RunConfig& cfg, const PlanOptions& opt = {});
std::string plan_text(const PlanResult& r);  // the human report
std::string plan_json(const PlanResult& r);  // one JSON object
// Profiles the model (one meta forward) and fills r's predicted_step_seconds and FLOPs.
void add_cost_prediction(PlanResult& r);

// "8GiB", "8 GB", "512MiB", "1.5G" (K/M/G/T: binary), plain bytes. UsageError naming `flag`.
int64_t parse_bytes(const std::string& text, const std::string& flag);

// ---------------------------------------------------------------- the budget search
// docs/memory-model.md, "Fitting a budget".

// One module the search can checkpoint, with what checkpointing it adds to the units before it
// in the order: activation bytes freed and forward FLOPs recomputed, per sample.
struct CheckpointUnit {
  std::string path;   // "transformer.h.3.mlp"
  std::string block;  // "transformer.h.3"
  std::string rel;    // "mlp" ("" for the block itself)
  std::string type;   // "MLP"
  int64_t saved_bytes = 0;
  double flops = 0;
};
// A model as the search sees it, measured on meta at micro-batch 1 (plan/checkpoint_units.cpp;
// 2 for a model with batch norm, whose figures are then halved).
struct CheckpointProfile {
  Precision precision = Precision::True32;
  int64_t min_micro_batch = 1;                // 2 with batch norm: one sample cannot train it
  std::vector<std::string> blocks;            // transformer block paths
  std::vector<CheckpointUnit> order;          // most bytes saved per recompute FLOP first
  std::map<std::string, double> module_flops; // forward FLOPs per sample of each wrappable module
  double forward_flops = 0;                   // the whole model's forward FLOPs per sample
  int64_t tokens_per_sample = 1;              // rows a block sees per sample (GEMM size)
  int64_t module_calls = 0;                   // wrappable module calls in one forward (launch overhead)
  int64_t parameters = 0, parameter_tensors = 0, parameter_bytes = 0;
  double checkpoint_flops = 0;                // recompute FLOPs per sample of the profiled config's --checkpoint
  int measurements = 0;                       // meta forwards it took
  double recompute_flops(size_t k) const;     // per sample, of the first k units
  int64_t saved_bytes(size_t k) const;        // per sample, of the first k units (additive estimate)
  double flops_of(const std::vector<std::string>& paths) const;
  nn::CheckpointSpec spec(size_t k) const;    // the --checkpoint value selecting the first k units
};
// measure_units false: only FLOPs and sizes (one forward), no per-module checkpoint measurements.
CheckpointProfile profile_model(const RunConfig& cfg, bool measure_units = true);

// The cost model (src/plan/cost_model.cpp, constants in one place there): a step's time on the
// reference GPU (H200, leantrain's kernels), in seconds, and its parts.
struct StepCost {
  // Seconds of one rank (the whole step on one device): its share of the batch, its optimizer
  // shard, and with --devices 2+ what communication adds to it.
  double compute = 0, recompute = 0, micro_batches = 0, optimizer = 0, fused = 0, communication = 0;
  double penalty = 0;           // lower-precision optimizer state: a preference, not time
  double recompute_flops = 0;   // per optimizer step, per rank
  double communication_bytes = 0;  // per rank and step (ring collectives)
  int64_t devices = 1;
  double seconds() const { return compute + recompute + micro_batches + optimizer + fused + communication; }  // wall
  // What the search minimises: device-seconds (wall time x devices) plus the penalty, so a run on
  // more GPUs must save more than it spends.
  double cost() const { return (seconds() + penalty) * double(devices); }
};
// `recompute_flops` per sample (CheckpointProfile::recompute_flops or flops_of); `base` names the
// optimizer and state precision the user asked for (a leaner state pays a penalty against it).
StepCost predict_step_cost(const RunConfig& c, const CheckpointProfile& m, double recompute_flops, const RunConfig& base);
// `--checkpoint selective` recomputes no matmul, only elementwise work; the FLOP-based model
// counts it as this share of the blocks' forward FLOPs (its time measured against `blocks`').
double selective_recompute_flops(const CheckpointProfile& m);

struct FitCandidate {
  RunConfig config;
  std::string state;    // optimizer state: "f32", "bf16" or "8-bit"
  size_t units = 0;     // checkpointed: the first `units` of the profile's order (0 with selective)
  bool planned = false, fits = false, pareto = false;
  std::string skipped;  // why it was not planned (refused combination)
  int64_t peak_allocated = 0, peak_reserved = 0, total_needed = 0;
  double time = 0;      // predicted step time relative to the given config
  double cost = 0;      // time plus the state-precision penalty, relative: what is minimised
  double recompute_flops = 0;  // per optimizer step
  int worst_rank = 0;          // with --devices 2+: the rank of the largest need (the one reported)
};
struct FitResult {
  int64_t budget = 0;
  std::vector<FitCandidate> candidates;  // every candidate planned, in the order planned
  int chosen = -1;                       // index into candidates; -1 when nothing fits
  CheckpointProfile profile;             // of the chosen precision (the given one when none fits)
  int plans = 0;                         // meta dry runs made
  double seconds = 0;                    // the whole search
};
// Searches precision x micro-batch x optimizer-state precision x fused step x checkpoint set
// (prefixes of the profile's order, bisected) for the cheapest config whose total (peak reserved
// + context) fits `budget`. Throws lt::Error when none fits, naming the closest candidate.
FitResult fit_budget(const RunConfig& base, int64_t budget, const PlanOptions& opt = {});
std::string fit_table(const FitResult& f);  // the Pareto table, chosen marked
std::string fit_json(const FitResult& f);   // "candidates": [...] and the checkpoint order
// plan --budget B --maximize seq-len|batch (src/plan/maximize.cpp): the largest --seq-len, or the
// largest --batch (micro-batch = batch), whose total need fits `budget`, every other flag as given.
struct MaximizeResult {
  std::string what;           // "seq-len" or "batch"
  int64_t budget = 0;
  int64_t value = 0;          // the answer
  PlanResult result;          // its plan
  int64_t next = 0;           // the smallest value found not to fit (0: none found)
  bool exact = false;         // next == value + 1
  bool capped = false;        // the run cap stopped the growth before a miss
  int64_t first_miss = 0, smallest_need = 0, refused = 0;
  std::string refused_why;    // the model refused `refused` (past its positions)
  int plans = 0;
  double seconds = 0;
};
// UsageError: `what` other than seq-len/batch, seq-len on a model of fixed length; lt::Error when
// even 1 misses the budget.
MaximizeResult maximize_fit(const RunConfig& base, const std::string& what, int64_t budget, const PlanOptions& opt = {});
std::string maximize_line(const MaximizeResult& m);
// The command that reproduces `c`: "leantrain train --model M ..." (or --config PATH), the model
// always named, every other flag only where it differs from the default.
std::string command_line(const RunConfig& c);

// train --metrics-json: the device allocator's peaks after a run, as plan --json names them.
void write_run_memory_json(const std::string& path, const RunConfig& cfg, const RunResult& run);
// {"parameter": peak, ...} of a pinned-host account: "pinned_host_categories_peak" in both JSONs.
std::string pinned_host_categories_json(const MemoryStats& s);

// A real run's OOM, explained: the category that grew most, predicted need versus available,
// and the plan command that fits. Returns the message's "why (fix)" parts.
std::string oom_guidance(const RunConfig& cfg, const OutOfMemoryError& e);

}  // namespace lt
