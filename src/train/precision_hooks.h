// The step hooks of --precision and --fused-step. The trainer adds them from its config, so the
// loop itself only knows the StepHook seams (scale_loss, grad_pre_scale, skip_nonfinite_step...).
#pragma once
#include <string>

#include "leantrain/precision.h"
#include "train/step_hooks.h"

namespace lt {

struct RunConfig;

// 16-mixed: scales the loss, hands 1/scale to clipping and the optimizer (no unscaling pass),
// skips a step whose gradients overflowed, updates the scale, and checkpoints it.
class LossScaleHook : public StepHook {
 public:
  explicit LossScaleHook(const GradScalerOptions& o = {}) : scaler_(o) {}
  const char* name() const override { return "loss_scaler"; }
  Tensor scale_loss(const Tensor& loss) override;
  float grad_pre_scale() const override { return float(1.0 / scaler_.scale()); }
  bool skip_nonfinite_step(Trainer&) override;
  bool norm_before_update() const override { return true; }  // an overflow skips the update
  void after_step(Trainer&, bool applied) override;
  std::string state() const override { return scaler_.state_json(); }
  void load_state(const std::string& s) override { scaler_.load_state_json(s); }
  GradScaler& scaler() { return scaler_; }

 private:
  GradScaler scaler_;
  bool found_inf_ = false;
};

// Adds the hooks the config asks for to a trainer whose optimizer exists.
void add_precision_hooks(Trainer& t);

// The line to print at the start of a run whose policy risks overflow ("" when none).
std::string precision_warning(const RunConfig& cfg);

}  // namespace lt
