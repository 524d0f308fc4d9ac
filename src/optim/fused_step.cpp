// Hooks hold a weak reference to the shared state, so destroying the FusedStep disarms them
// (a tensor's hooks cannot be removed once registered).
#include "leantrain/fused_step.h"

#include "backend/backend.h"
#include "leantrain/error.h"
#include "leantrain/ops.h"

namespace lt {

struct FusedStep::Shared {
  Optimizer* opt = nullptr;
  float grad_scale = 1.0f;
  int64_t updates = 0;
  bool norm_pass = false;
  Tensor sum_squares;  // f32 [1] on the gradients' device, during a norm pass
};

FusedStep::FusedStep(Optimizer& opt) : shared_(std::make_shared<Shared>()) {
  shared_->opt = &opt;
  std::weak_ptr<Shared> weak = shared_;
  for (auto& [name, p] : opt.named_params()) {
    // An init-capture: clang 14 (the sanitizer and fuzz builds) cannot capture a structured binding.
    p.register_post_accumulate_grad_hook([weak, name = name](Tensor& param) {
      auto sh = weak.lock();
      if (!sh) return;
      if (sh->norm_pass) {
        const Tensor g = param.grad();
        if (!sh->sum_squares.defined()) {
          MemoryCategoryScope ws(Category::Workspace);
          sh->sum_squares = zeros({1}, DType::F32, g.device());
        }
        LT_CHECK(g.device() == sh->sum_squares.device(), "--fused-step with --clip: gradients on two devices",
                 "the norm pass sums them in one place", "keep the model on one device");
        backend_for(g.device()).sum_squares(sh->sum_squares, std::span<const Tensor>(&g, 1));
        param.set_grad(Tensor());
        return;
      }
      // The category the unfused step runs in (state is created under its own scope anyway).
      MemoryCategoryScope st(Category::OptimizerState);
      sh->opt->step_param(name, sh->grad_scale);  // by name: the optimizer's key
      param.set_grad(Tensor());  // the buffer is freed as soon as the engine drops its reference
      ++sh->updates;
    });
  }
}

FusedStep::~FusedStep() = default;

void FusedStep::set_grad_scale(float s) { shared_->grad_scale = s; }

int64_t FusedStep::updates() const { return shared_->updates; }

void FusedStep::begin_norm_pass() {
  shared_->norm_pass = true;
  shared_->sum_squares = Tensor();
}

GradNorm FusedStep::finish_norm_pass(double max_norm) {
  Shared& sh = *shared_;
  sh.norm_pass = false;
  const Tensor acc = std::move(sh.sum_squares);
  sh.sum_squares = Tensor();
  // A dry run on meta has no values: the norm is 0 and nothing is clipped.
  return grad_norm_from_sum_squares(acc.defined() && !acc.device().is_meta() ? acc.item() : 0.0, max_norm);
}

}  // namespace lt
