// Extension points of the training step. A memory technique that changes the step does it by
// overriding some of these, not by editing the loop:
//   mixed precision + loss scaling: scale_loss, grad_pre_scale, after_backward (skip on overflow),
//     after_step (update the scale), state (the scale goes into the checkpoint);
//   activation checkpointing: on_start installs forward wrappers on the selected modules;
//   optimizer step inside backward: on_start registers post-accumulate-grad hooks that call
//     Optimizer::step_param, and owns_optimizer_step() tells the loop not to step again; with
//     --clip the loop runs a norm pass first through fused_step();
//   sharding (src/dist/data_parallel.cpp): on_batch keeps this rank's rows, post-accumulate-grad
//     hooks reduce gradient buckets during backward, after_step all-gathers parameters.
#pragma once
#include <string>

#include "leantrain/tensor.h"

namespace lt {

class Trainer;
class FusedStep;
struct Batch;
struct EvalSums;

class StepHook {
 public:
  virtual ~StepHook() = default;
  virtual const char* name() const = 0;
  // Once, after the model and optimizer exist and before the first step.
  virtual void on_start(Trainer&) {}
  // Each micro-batch as the loader made it; data parallelism keeps this rank's rows of it.
  virtual void on_batch(Batch&) {}
  // Each micro-batch's loss, before its backward; data parallelism averages it over the ranks.
  virtual double reduce_loss(double loss) { return loss; }
  // Each held-out batch of an evaluation (false: this rank leaves it out of its sums), and the
  // evaluation's sums: data parallelism evaluates the rank's rows and adds the ranks' sums.
  virtual bool on_eval_batch(Batch&) { return true; }
  virtual void reduce_eval(EvalSums&) {}
  // The gradient norm the step reports, checks and clips by; ZeRO-2 / FSDP combine the ranks'
  // shard norms (the loop then recomputes the clip coefficient from it).
  virtual double reduce_grad_norm(double norm) { return norm; }
  // The loss each micro-batch backpropagates (already divided by the accumulation count).
  virtual Tensor scale_loss(const Tensor& loss) { return loss; }
  // A factor the gradients still carry after backward (1 / loss scale); the optimizer removes it.
  virtual float grad_pre_scale() const { return 1.0f; }
  // After all micro-batches' backward. Return false to skip this optimizer step (e.g. overflow).
  virtual bool after_backward(Trainer&) { return true; }
  // Called when the gradients hold an inf/NaN. Return true to skip the step (loss scaling) rather
  // than stop the run with a NumericError. Every hook is asked.
  virtual bool skip_nonfinite_step(Trainer&) { return false; }
  // True when the step must know the gradient norm before the optimizer runs (a loss scale that
  // may skip the step; ranks whose norms are combined). Otherwise an unclipped step takes the norm
  // from the update's own read of the gradients (Optimizer::step_measuring) and checks it at the
  // next step.
  virtual bool norm_before_update() const { return false; }
  // True when this hook already stepped the optimizer during backward.
  virtual bool owns_optimizer_step() const { return false; }
  // The optimizer-in-backward this hook runs, if any (the loop drives its norm pass for --clip).
  virtual FusedStep* fused_step() { return nullptr; }
  virtual void after_step(Trainer&, bool applied) {}
  // Checkpointed state (JSON text), e.g. the loss scale.
  virtual std::string state() const { return ""; }
  virtual void load_state(const std::string&) {}
};

}  // namespace lt
