// Hooks hold a weak reference to the shared state, so destroying the FusedStep disarms them
// (a tensor's hooks cannot be removed once registered).
//
// Note [Updates beside the backward]
// With LEANTRAIN_OPT_STREAM, an update that runs in place (no master copy, state on the
// parameter's device) goes to the optimizer stream: that stream waits for an event recorded on
// the compute stream when the gradient was complete, runs the update, and the gradient is freed
// with its use there recorded (record_stream), so the caching allocator hands its block to the
// compute stream only once that stream is ordered after the update. The compute stream waits for
// the update LEANTRAIN_OPT_STREAM_LAG updates back at each hook (so the blocks freed up to it come
// back to its pool: the peak stays near the in-turn one) and for all of them in join(), before
// anything reads a parameter again. Every decision is made from program order (events recorded
// and waited for), so a plan on meta replays the same allocations.
//
// Kept casts (Optimizer::set_kept_casts) are written by the update, on whichever stream it runs: a
// hook fires only once every use of the parameter in this backward has added its gradient, so no
// kernel of this backward reads the copy after it changes.
#include "leantrain/fused_step.h"

#include <deque>
#include <optional>

#include "backend/backend.h"
#include "backend/event.h"
#include "core/knobs.h"
#include "leantrain/error.h"
#include "leantrain/ops.h"

namespace lt {

struct FusedStep::Shared {
  Optimizer* opt = nullptr;
  float grad_scale = 1.0f;
  int64_t updates = 0;
  bool norm_pass = false;
  Tensor sum_squares;  // f32 [1] on the gradients' device, during a norm pass
  bool side = false;   // updates on kOptimStream (LEANTRAIN_OPT_STREAM)
  size_t lag = 8;      // LEANTRAIN_OPT_STREAM_LAG
  std::optional<Device> side_device;             // where updates went beside the backward, until join()
  std::deque<std::unique_ptr<Event>> in_flight;  // one after each such update, oldest first
  // The update of `param` on the optimizer stream (Note [Updates beside the backward]).
  void update_beside(const std::string& name, Tensor& param) {
    const Device dev = param.device();
    LT_CHECK(!side_device || *side_device == dev, "--fused-step: parameters on two devices",
             "the optimizer stream's updates are joined on one device", "keep the model on one device");
    side_device = dev;
    Event produced(dev);
    produced.record();  // the compute stream: the gradient is complete
    auto done = std::make_unique<Event>(dev);
    {
      StreamGuard on_opt(kOptimStream);
      produced.block_current_stream();
      opt->step_param(name, grad_scale);
      record_stream(param.grad(), kOptimStream);
      done->record();
    }
    in_flight.push_back(std::move(done));
    while (in_flight.size() > lag) {
      in_flight.front()->block_current_stream();
      in_flight.pop_front();
    }
  }

  void join() {
    if (!side_device) return;
    Event all(*side_device);
    {
      StreamGuard on_opt(kOptimStream);
      all.record();
    }
    all.block_current_stream();
    in_flight.clear();
    side_device.reset();
  }
};

FusedStep::FusedStep(Optimizer& opt) : shared_(std::make_shared<Shared>()) {
  shared_->opt = &opt;
  shared_->side = knob_int("LEANTRAIN_OPT_STREAM") > 0;
  shared_->lag = size_t(knob_int("LEANTRAIN_OPT_STREAM_LAG"));
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
      const Device dev = param.device();
      if (sh->side && (dev.is_cuda() || dev.is_meta()) && sh->opt->prepare_param(name))
        sh->update_beside(name, param);
      else
        sh->opt->step_param(name, sh->grad_scale);  // by name: the optimizer's key
      param.set_grad(Tensor());  // the buffer is freed as soon as the engine drops its reference
      ++sh->updates;
    });
  }
}

FusedStep::~FusedStep() {
  try {
    shared_->join();
  } catch (...) {  // a device error here is reported by the next call that touches the device
  }
}

void FusedStep::join() { shared_->join(); }

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
