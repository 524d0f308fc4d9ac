// `leantrain plan`: know a run's GPU memory before launching it. The run's real code (model
// build, training steps, evaluation) executes on the meta device, whose allocator runs the CUDA
// caching policy over fake addresses, so the peaks it reports are the ones a GPU run measures.
// docs/memory-model.md explains the model, what it covers and what lies outside it.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "leantrain/memory.h"
#include "leantrain/train.h"

namespace lt {

// Measured on the H200 of the GPU machine: the CUDA context, then the compute stream and the
// cuBLASLt handle. Outside the allocator, so added on their own line.
inline constexpr int64_t kCudaContextBytes = int64_t(527) << 20;
inline constexpr int64_t kCudaLibraryBytes = int64_t(2) << 20;

struct PlanOptions {
  std::string device_type = "cuda";  // cuda: simulated caching allocator; cpu: reserved == allocated
  int64_t steps = 2;                 // optimizer steps dry-run (capped by --steps when that is smaller)
  int64_t context_bytes = -1;        // -1: kCudaContextBytes + kCudaLibraryBytes on cuda, 0 on cpu
};

struct PlanResult {
  RunConfig config;
  std::string device_type;
  std::string description;   // the task's one-line model description
  int64_t parameters = 0;
  int64_t steps = 0;         // optimizer steps planned
  bool evaluates = false;
  MemoryStats stats;         // the simulated allocator at the end, the model still alive
  int64_t peak_allocated = 0, peak_reserved = 0;
  std::string peak_phase;    // "model build", "step 1", "step 2", "evaluation"
  std::array<int64_t, kNumCategories> at_peak{};  // allocated bytes by category at the peak
  int64_t workspace_bytes = 0;  // the cuBLASLt workspace mirror (0 when no GEMM ran, or on cpu)
  int64_t context_bytes = 0;
  int64_t total_needed() const { return peak_reserved + context_bytes; }
  double seconds = 0;        // how long the plan took
};

// Dry-runs `cfg` on meta. Throws UsageError for bad flags, as `train` would.
PlanResult plan_run(const RunConfig& cfg, const PlanOptions& opt = {});
std::string plan_text(const PlanResult& r);  // the human report
std::string plan_json(const PlanResult& r);  // one JSON object

// "8GiB", "8 GB", "512MiB", "1.5G" (K/M/G/T: binary), plain bytes. UsageError naming `flag`.
int64_t parse_bytes(const std::string& text, const std::string& flag);

// The relative cost model of the budget search (docs/memory-model.md, "Fitting a budget"):
// compute of one optimizer step of `c`, in units of the same step of `base`. One function so it
// can be checked against measured step times.
double relative_step_cost(const RunConfig& c, const RunConfig& base);

struct FitCandidate {
  RunConfig config;
  bool planned = false, fits = false, pareto = false;
  std::string skipped;  // why it was not planned (dominated, refused combination)
  int64_t peak_reserved = 0, total_needed = 0;
  double cost = 0;
};
struct FitResult {
  int64_t budget = 0;
  std::vector<FitCandidate> candidates;  // in the order considered (cheapest first)
  int chosen = -1;                       // index into candidates; -1 when nothing fits
};
// Searches precision, micro-batch, activation checkpointing and the fused step for the cheapest
// config whose total (peak reserved + context) fits `budget`. Throws lt::Error when none fits,
// naming the smallest candidate's need.
FitResult fit_budget(const RunConfig& base, int64_t budget, const PlanOptions& opt = {});
std::string fit_table(const FitResult& f);
// The command that reproduces `c`: "leantrain train --model M ..." (or --config PATH), the model
// always named, every other flag only where it differs from the default.
std::string command_line(const RunConfig& c);

// train --metrics-json: the device allocator's peaks after a run, as plan --json names them.
void write_run_memory_json(const std::string& path, const RunConfig& cfg);

// A real run's OOM, explained: the category that grew most, predicted need versus available,
// and the plan command that fits. Returns the message's "why (fix)" parts.
std::string oom_guidance(const RunConfig& cfg, const OutOfMemoryError& e);

}  // namespace lt
