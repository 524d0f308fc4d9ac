#include "train/precision_hooks.h"

#include <memory>

#include "leantrain/fused_step.h"
#include "leantrain/ops.h"
#include "train/trainer.h"

namespace lt {

namespace {

// --fused-step: on_start arms the optimizer hooks; the loop then does not step (with --clip it
// runs a norm pass before the updating backward: Trainer::step).
class FusedStepHook : public StepHook {
 public:
  const char* name() const override { return "fused_step"; }
  void on_start(Trainer& t) override { fused_ = std::make_unique<FusedStep>(t.optimizer()); }
  bool owns_optimizer_step() const override { return true; }
  FusedStep* fused_step() override { return fused_.get(); }

 private:
  std::unique_ptr<FusedStep> fused_;  // destroyed with the trainer's hooks, before its optimizer
};

}  // namespace

Tensor LossScaleHook::scale_loss(const Tensor& loss) { return scale(loss, scaler_.scale()); }

bool LossScaleHook::skip_nonfinite_step(Trainer&) {
  found_inf_ = true;
  return true;
}

void LossScaleHook::after_step(Trainer&, bool) {
  scaler_.update(found_inf_);
  found_inf_ = false;
}

void add_precision_hooks(Trainer& t) {
  const RunConfig& c = t.config();
  if (precision_policy(c.precision).loss_scaling) t.add_hook(std::make_unique<LossScaleHook>());
  if (c.fused_step) t.add_hook(std::make_unique<FusedStepHook>());
}

std::string precision_warning(const RunConfig& c) {
  if (c.precision != Precision::True16) return "";
  return "warning: --precision 16-true trains in f16 without loss scaling: values above 65504 overflow and "
         "gradients below 6e-8 flush to zero; bf16-true or 16-mixed avoid both";
}

}  // namespace lt
