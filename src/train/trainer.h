// The training step, in one place: micro-batches of forward + backward (gradient accumulation),
// then clipping and the optimizer update, with StepHooks at each seam. Memory categories are set
// here, so every byte of a step lands under its owner: batches under input, forward/backward
// temporaries under activation, .grad under gradient, optimizer state under optimizer_state.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/knobs.h"
#include "leantrain/error.h"
#include "leantrain/optim.h"
#include "train/scalar_readback.h"
#include "train/step_hooks.h"
#include "train/step_trace.h"
#include "train/task.h"

namespace lt {

struct StepOutcome {
  double loss = 0;       // mean over the micro-batches
  double grad_norm = 0;  // before clipping; NaN while grad_norm_pending
  // An unclipped step's norm comes from the update's own read of the gradients and is read back
  // at the next step (no wait for the update here): Trainer::grad_norm_of(step) has it.
  bool grad_norm_pending = false;
  double lr = 0;
  bool applied = true;   // false when a hook skipped the update
  int64_t items = 0;     // images or tokens consumed
  std::vector<Metric> metrics;  // --objective dpo: the step's rewards (TRL's names), means over its pairs
};

class Trainer {
 public:
  Trainer(const RunConfig& cfg, Task& task);

  void add_hook(std::unique_ptr<StepHook> h) { hooks_.push_back(std::move(h)); }
  // A hook that must see the step before the others (data parallelism: gradients are reduced
  // before the precision hooks check them).
  void add_hook_first(std::unique_ptr<StepHook> h) { hooks_.insert(hooks_.begin(), std::move(h)); }
  // Runs on_start of every hook, then (--objective dpo, a full fine-tune) the reference pass
  // unless a checkpoint brought its values; call once before the first step.
  void start();
  // One optimizer step. Throws NumericError (naming the step) when the loss is NaN/inf.
  StepOutcome step();
  // Held-out evaluation under inference mode; the model is back in training mode after.
  EvalInfo evaluate();

  int64_t steps_done() const { return step_; }
  int64_t total_steps() const { return total_steps_; }
  double epochs_done() const;

  Task& task() { return task_; }
  models::Model& model() { return *task_.model; }
  Optimizer& optimizer() { return *opt_; }
  DataLoader& loader() { return *task_.train; }
  const std::vector<std::unique_ptr<StepHook>>& hooks() const { return hooks_; }
  const RunConfig& config() const { return cfg_; }
  Device device() const { return task_.device; }

  // Restores the step counter (the rest is restored by the checkpoint reader).
  void set_steps_done(int64_t s) { step_ = s; }

  // The gradient norm of `step` (1-based) when it was pending (StepOutcome::grad_norm_pending):
  // waits for that step's update if needed. Throws NumericError, naming the step, when it is not
  // finite. NaN for a step it no longer holds. Allocates and frees nothing.
  double grad_norm_of(int64_t step);

 private:
  RunConfig cfg_;
  Task& task_;
  std::vector<Tensor> params_;
  std::unique_ptr<Optimizer> opt_;
  LrSchedule schedule_;
  std::vector<std::unique_ptr<StepHook>> hooks_;
  int64_t step_ = 0, total_steps_ = 0, micro_batch_ = 0;
  StepTrace trace_{task_.device};  // LEANTRAIN_STEP_TRACE
  // The last unclipped step's sum of squares (f32 [1]), held until the next step has read its
  // losses or an evaluation starts (settle_norm): the same moments in a plan as in a run.
  struct PendingNorm {
    Tensor sumsq;
    int64_t step = 0;
    double loss = 0;
    std::optional<double> norm;  // read already
  } pending_;
  std::pair<int64_t, double> settled_{0, 0.0};  // (step, norm) of the last settled one
  // The norm-in-update path reads its losses and its norm where the stream made them, not at the
  // stream's tail (train/scalar_readback.h): the host then prepares the update while the backward
  // runs. Made at the first such step.
  std::unique_ptr<ScalarReadback> loss_readback_, norm_readback_;
  // LEANTRAIN_NORM_IN_UPDATE, read once: a run (and its plan) keeps one way for all its steps.
  const bool norm_in_update_on_ = knob_on("LEANTRAIN_NORM_IN_UPDATE");
  // Reads and checks the pending norm (throws NumericError on a non-finite one) and frees it.
  void settle_norm();
  double read_pending_norm();
  bool norm_in_update() const;
  // The error of a non-finite gradient norm at `step`: `why`, and a lower --lr (and --clip) to try.
  NumericError nonfinite_norm(double norm, int64_t step, const std::string& why, bool suggest_clip) const;
};

// Steps a run takes: --steps, else ceil(--epochs x steps per epoch), one epoch by default.
int64_t total_steps_for(const RunConfig& cfg, int64_t steps_per_epoch);
// Optimizer steps in one pass over `micro_batches` micro-batches (at least 1).
int64_t steps_per_epoch(const RunConfig& cfg, int64_t micro_batches);

}  // namespace lt
