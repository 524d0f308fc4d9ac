// The optimizer step inside backward (--fused-step). Each parameter is updated from its
// post-accumulate-grad hook as soon as its gradient is complete, and that gradient is freed on
// the spot, so at most one parameter's gradient exists at a time instead of the whole model's.
//
// What follows from updating during backward:
//   - a step's gradient must be complete after one backward: no accumulation over micro-batches;
//   - nothing that needs all gradients can run before the first update. Clipping by the global
//     norm therefore takes a norm pass: a first backward whose hooks only add each gradient's
//     squares to the norm and free it, then the same forward and backward again, updating with
//     the clip coefficient (the trainer runs both; twice the compute, the same memory). The
//     inf/NaN check that lets a loss scaler skip a step is not offered (16-mixed is refused);
//   - the learning rate (and grad_scale) must be set before backward.
#pragma once
#include <cstdint>
#include <memory>

#include "leantrain/optim.h"

namespace lt {

class FusedStep {
 public:
  // Registers a hook on every parameter of `opt`. The hooks act while this object lives (and
  // `opt` must outlive it); afterwards backward leaves gradients in .grad as usual.
  explicit FusedStep(Optimizer& opt);
  ~FusedStep();
  FusedStep(const FusedStep&) = delete;
  FusedStep& operator=(const FusedStep&) = delete;

  // Factor applied to every gradient inside the update (1 / loss scale, clip coefficient); set
  // before backward.
  void set_grad_scale(float s);
  // Until finish_norm_pass: the hooks add the squares of each gradient to a running sum and free
  // it, updating nothing.
  void begin_norm_pass();
  // Ends the norm pass: the global gradient norm (a host read), and the clip coefficient for
  // max_norm (as clip_grad_norm: min(1, max_norm / (norm + 1e-6)); NaN when the norm is not finite).
  GradNorm finish_norm_pass(double max_norm);
  // Parameters stepped since construction.
  int64_t updates() const;
  // Work enqueued on the current (compute) stream from now on runs after every update made so
  // far, wherever it ran (Note [Updates beside the backward], fused_step.cpp). Call it after each
  // backward, before anything reads the parameters or their state; the destructor calls it too.
  void join();

 private:
  struct Shared;
  std::shared_ptr<Shared> shared_;
};

}  // namespace lt
