// Hooks hold a weak reference to the shared state, so destroying the FusedStep disarms them
// (a tensor's hooks cannot be removed once registered).
#include "leantrain/fused_step.h"

namespace lt {

struct FusedStep::Shared {
  Optimizer* opt = nullptr;
  float grad_scale = 1.0f;
  int64_t updates = 0;
};

FusedStep::FusedStep(Optimizer& opt) : shared_(std::make_shared<Shared>()) {
  shared_->opt = &opt;
  std::weak_ptr<Shared> weak = shared_;
  for (Tensor& p : opt.params()) {
    p.register_post_accumulate_grad_hook([weak](Tensor& param) {
      auto sh = weak.lock();
      if (!sh) return;
      // The category the unfused step runs in (state is created under its own scope anyway).
      MemoryCategoryScope st(Category::OptimizerState);
      sh->opt->step_param(param, sh->grad_scale);
      param.set_grad(Tensor());  // the buffer is freed as soon as the engine drops its reference
      ++sh->updates;
    });
  }
}

FusedStep::~FusedStep() = default;

void FusedStep::set_grad_scale(float s) { shared_->grad_scale = s; }

int64_t FusedStep::updates() const { return shared_->updates; }

}  // namespace lt
