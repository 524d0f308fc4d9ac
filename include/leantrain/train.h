// A training run: what to train (RunConfig, leantrain/recipe.h), the loop that trains it (train()), its checkpoints
// and the reports it prints (progress line, memory summary). The CLI is a thin layer over this.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "leantrain/device.h"
#include "leantrain/error.h"
#include "leantrain/memory.h"
#include "leantrain/recipe.h"
#include "leantrain/usage_error.h"

namespace lt {

// Checks values and combinations; throws UsageError naming the flag to change.
void validate(const RunConfig& cfg);
// auto -> cuda when a GPU answers, else cpu; otherwise Device::parse (a UsageError when unknown).
Device resolve_device(const std::string& spec);

// The config as stored in a checkpoint (JSON text) and back. Unknown keys are ignored; a missing
// one is an lt::Error naming it (every save writes them all).
std::string config_to_json(const RunConfig& cfg);
RunConfig config_from_json(const std::string& json);

// A number a step or an evaluation reports beside its loss: a DPO run's rewards/chosen,
// rewards/rejected, rewards/accuracies and rewards/margins (TRL's names).
struct Metric {
  std::string name;
  double value = 0;
};

// What the loop reports as it goes.
struct ProgressInfo {
  int64_t step = 0, total_steps = 0;
  double epoch = 0;
  double loss = 0, lr = 0;
  // Images/s or tokens/s over this process's steps, leaving out its first step once it has run
  // two or more (the first pays for cuBLAS heuristics and allocator growth): steady state.
  double items_per_s = 0;
  const char* unit = "img/s";
  double elapsed_s = 0, eta_s = 0;
  int64_t mem_current = 0, mem_peak = 0;  // allocated bytes on the run's device
  std::vector<Metric> metrics;            // the step's other numbers (--objective dpo)
};
struct EvalInfo {
  int64_t step = 0;
  double loss = 0;
  std::optional<double> accuracy;  // classifiers only
  std::vector<Metric> metrics;     // --objective dpo: the held-out pairs' rewards
};
// An evaluation's sums over the tokens (or images, or preference pairs) it saw: what the ranks of
// a job add up. Pairs: correct counts chosen rewards above rejected ones, chosen and rejected sum
// the rewards.
struct EvalSums {
  double loss = 0, count = 0, correct = 0, chosen = 0, rejected = 0;
};
struct RunResult {
  // Several ranks: each rank's peak allocated / reserved bytes, in rank order (empty on one).
  std::vector<int64_t> rank_peak_allocated, rank_peak_reserved;
  int64_t steps = 0;       // the last step trained (counting resumed ones)
  double final_loss = 0;   // last training loss
  std::vector<Metric> final_metrics;  // the last step's other numbers (--objective dpo)
  std::optional<EvalInfo> eval;  // the last evaluation
  double seconds = 0;      // wall time of this process's part of the run
  std::vector<double> losses;    // training loss of each step this process ran
  std::vector<double> step_seconds;  // wall time of each of those steps, device work included
  const char* unit = "img/s";        // or "tok/s"
  double items_per_s = 0;            // over all of this process's steps
  double steady_items_per_s = 0;     // leaving out its first step when it ran two or more
  Device device;
  MemoryStats memory;            // the device's allocator at the end, with the model still alive
  MemoryStats pinned_host;       // the device's pinned-host account (loader staging), same moment
  MemoryStats disk;              // the device's disk account (--offload-dir's state file), whole run
};

// Receives reports; the CLI prints them. All callbacks are optional.
struct RunObserver {
  std::function<void(const std::string&)> on_message;  // one-off lines ("model: ...")
  std::function<void(const ProgressInfo&)> on_step;
  std::function<void(const EvalInfo&)> on_eval;
  std::function<void(const std::string& dir, int64_t step)> on_save;
};

// Runs the whole training; throws lt::Error (UsageError, NumericError, ...) on failure.
// A NumericError leaves the last checkpoint untouched.
RunResult train(const RunConfig& cfg, const RunObserver& obs = {});

// Sampling from a saved GPT checkpoint, in inference mode.
struct GenerateConfig {
  std::string checkpoint;
  std::string prompt;
  // A conversation rendered by the checkpoint's chat template with its generation prompt; sampling
  // stops at the template's end-of-turn token(s) or EOS, and only the reply is returned. The
  // conversation is `messages` (a JSON file: {"messages": [...], "tools": [...]} as a data line,
  // or the list alone), else one user message, `prompt`. `messages` implies chat.
  bool chat = false;
  std::string messages;
  int64_t max_new_tokens = 100;
  double temperature = 1.0;
  int64_t top_k = 0;  // 0: no cut
  uint64_t seed = 0;
  std::string device = "auto";
};
// Returns prompt + sampled text; on_text, when given, receives each new piece as it is sampled.
std::string generate_text(const GenerateConfig& cfg,
                          const std::function<void(const std::string&)>& on_text = nullptr);

// torch.cuda.memory_summary-like table of the device's allocator: allocated/reserved/requested
// rows, then one row per category, each with current and peak.
std::string memory_summary(Device d);                          // the allocator's stats now
std::string memory_summary(Device d, const MemoryStats& stats);  // a snapshot of them
// The same, followed by the pinned-host account's rows (total and each category that was used).
// With `disk` (its peak > 0): the --offload-dir file's rows too.
std::string memory_summary(Device d, const MemoryStats& stats, const MemoryStats& pinned_host,
                           const MemoryStats* disk = nullptr);
std::string format_bytes(int64_t bytes);
std::string format_duration(double seconds);  // "1m05s", "12.3s", "2h03m"

}  // namespace lt
