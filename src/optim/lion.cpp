// Lion: the sign of an interpolated momentum, one state tensor (f32, or bf16 with state_dtype).
#include "backend/backend.h"
#include "leantrain/error.h"
#include "leantrain/ops.h"
#include "leantrain/optim_lean.h"

namespace lt {

Lion::Lion(std::vector<ParamGroup> groups, const LionOptions& o)
    : Optimizer(std::move(groups), o.lr, o.weight_decay, "lion"), opt_(o) {
  LT_CHECK(o.beta1 >= 0 && o.beta1 <= 1 && o.beta2 >= 0 && o.beta2 < 1,
           "lion: betas (" + std::to_string(o.beta1) + ", " + std::to_string(o.beta2) + ") out of range",
           "beta1 must be in [0, 1] and beta2 in [0, 1)", "use e.g. 0.9 and 0.99");
  if (o.state_dtype)
    LT_CHECK(is_floating(*o.state_dtype), "lion: state dtype " + std::string(dtype_name(*o.state_dtype)),
             "the momentum must be floating", "use f32 or bf16");
}

std::vector<std::string> Lion::state_names() const { return {"exp_avg"}; }

std::vector<Tensor> Lion::make_state(const Tensor& p, Device device) const {
  return {zeros(p.shape(), opt_.state_dtype.value_or(p.dtype()), device)};
}

void Lion::update(const std::vector<Slot*>& slots, float grad_scale) {
  std::vector<Tensor> params, grads, m;
  for (Slot* s : slots) {
    params.push_back(s->param);
    grads.push_back(s->param.grad());
    m.push_back(s->state[0]);
  }
  const Slot& first = *slots.front();
  LionArgs a{float(lr()), float(opt_.beta1), float(opt_.beta2), float(first.weight_decay), grad_scale};
  const std::vector<uint64_t> streams = sr_streams(slots);
  a.sr.streams = streams;
  backend_for(first.param.device()).lion_step(params, grads, m, a);
}

}  // namespace lt
