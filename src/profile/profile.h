// `leantrain profile`: what checkpointing each module alone would buy and cost. For every
// candidate (each transformer block and, by default, its attention and its MLP; then all blocks
// together) the run is built afresh with only that module checkpointed, W warm-up steps and K
// timed steps are run with the device synchronised around each, and the peak allocated bytes
// are compared with those of the same run without checkpointing. The same sequence of runs is
// replayed on the meta device first (the planner's allocator), so each row carries the
// predicted peak beside the measured one; they agree to the byte.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "leantrain/train.h"

namespace lt {

struct ProfileOptions {
  std::string modules = "sublayers";  // blocks | sublayers | a regex over module paths
  bool subsets = false;               // every non-empty combination of those modules, checkpointed together
  int64_t warmup_steps = 2;           // W: untimed steps before the timed ones
  int64_t timed_steps = 5;            // K: the step time is the median of these
};

struct ProfileRow {
  std::string module;      // the module path; "all blocks" for the row of every block
  std::string kind;        // the module's class ("GPT2Block", "MLP", ...); "blocks" for all blocks
  std::string checkpoint;  // the --checkpoint value that reproduces this run
  int64_t peak_measured = 0, peak_predicted = 0;    // peak allocated bytes over the W+K steps
  int64_t saved_measured = 0, saved_predicted = 0;  // baseline peak minus this peak
  // The same for the activation category alone: what checkpointing frees even when the run's
  // peak lies elsewhere (the optimizer step, the model build).
  int64_t act_peak_measured = 0, act_peak_predicted = 0, act_saved_measured = 0, act_saved_predicted = 0;
  std::vector<double> step_ms;                      // the K timed steps
  double median_ms = 0, ms_added = 0;               // ms_added: median minus the baseline's
  double items_per_s = 0;                           // images or tokens per second at the median
  bool pareto = false;                              // no row saves as much for less time
  // Bytes saved per ms added (measured); not finite when the time added is <= 0.
  double bytes_per_ms() const;
};

struct ProfileResult {
  RunConfig config;         // as given (its checkpoint is "none")
  ProfileOptions options;
  Device device;
  std::string description;  // the task's line ("model gpt2-tiny: GPT-2, ...")
  std::string unit;         // "img/s" or "tok/s"
  std::string modules_note; // what set of modules was profiled, in words
  ProfileRow baseline;      // no checkpointing (saved 0, ms_added 0)
  std::vector<ProfileRow> rows;  // one per module, then "all blocks" when the model has blocks
  // The baseline is timed first and again last; their medians differ by more than 10% when
  // the machine's speed drifted during the profile (other work on it): the times are suspect.
  double baseline_first_ms = 0, baseline_last_ms = 0;
  bool drifted() const;
  int pick = -1;            // index into rows: the suggested single choice (see profile_pick), -1: none
  double seconds = 0;
  bool cpu() const { return !device.is_cuda(); }
};

// The modules `spec` selects for profiling, in model order: `blocks` (every transformer
// block), `sublayers` (each block, then its attention and its MLP) or a regular expression
// (every module whose whole path matches). Throws UsageError when nothing is selected or a
// matched module cannot be checkpointed.
std::vector<std::string> profile_modules(const RunConfig& cfg, const std::string& spec);

// Runs the profile. `progress` (optional) receives one line per configuration as it starts.
ProfileResult profile_run(const RunConfig& cfg, const ProfileOptions& opt,
                          const std::function<void(const std::string&)>& progress = nullptr);

// Marks the Pareto frontier (maximise x, minimise y): a point is on it when no other point has
// x >= and y <= with one of them strict. Ties (equal points) are all on it.
std::vector<bool> profile_pareto_front(const std::vector<double>& x, const std::vector<double>& y);
// The row a careful engineer would try first: on the frontier, saving bytes, with the most
// bytes saved per ms added, where a time added under `noise_ms` counts as noise_ms (timing noise
// must not make a near-free row look infinitely good). -1 when no row saves anything.
int profile_pick(const std::vector<ProfileRow>& rows, double noise_ms);

std::string profile_table(const ProfileResult& r);  // the report on stdout
std::string profile_json(const ProfileResult& r);   // one JSON object, every row
std::string profile_svg(const ProfileResult& r);    // the scatter, through scatter_svg

}  // namespace lt
