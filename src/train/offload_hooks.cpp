#include "train/offload_hooks.h"

#include <cstdio>
#include <memory>

#include "leantrain/precision.h"
#include "offload/offload_optimizer.h"
#include "offload/offload_trace.h"
#include "train/trainer.h"

namespace lt {

namespace {

class GradDrainHook : public StepHook {
 public:
  const char* name() const override { return "offload_grad_drain"; }
  void on_start(Trainer& t) override {
    opt_ = dynamic_cast<offload::OffloadOptimizer*>(&t.optimizer());
    if (!opt_) return;
    const RunConfig& c = t.config();
    micro_batches_ = c.micro_batch ? c.batch / c.micro_batch : 1;
    opt_->drain_during_backward();
    // Without clipping and loss scaling nothing needs every gradient before the update, and no
    // hook skips a step: each bucket is stepped on the host as soon as it lands, during backward.
    opt_->set_early_step(c.clip == 0 && !precision_policy(c.precision).loss_scaling);
    offload::trace_mark();
  }
  // Called once per micro-batch, just before its backward: counts them to arm the last one.
  Tensor scale_loss(const Tensor& loss) override {
    if (opt_) opt_->set_draining(++seen_ % micro_batches_ == 0);
    offload::trace_lap(offload::Phase::Forward);
    return loss;
  }
  bool after_backward(Trainer&) override {
    offload::trace_lap(offload::Phase::Backward);
    if (opt_) opt_->finish_backward();
    offload::trace_lap(offload::Phase::FinishWait);
    seen_ = 0;
    return true;
  }
  void after_step(Trainer&, bool) override {
    ++steps_;
    if (opt_ && offload::trace_on()) std::fprintf(stderr, "%s\n", offload::trace_step_line(steps_).c_str());
  }

 private:
  offload::OffloadOptimizer* opt_ = nullptr;
  int64_t micro_batches_ = 1, seen_ = 0;
  long long steps_ = 0;
};

}  // namespace

void add_offload_hooks(Trainer& t) {
  if (t.config().offload != OffloadKind::None) t.add_hook(std::make_unique<GradDrainHook>());
}

}  // namespace lt
