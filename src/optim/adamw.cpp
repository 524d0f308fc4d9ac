// AdamW (decoupled weight decay, bias correction, eps outside the sqrt), as torch.optim.AdamW.
#include "backend/backend.h"
#include "leantrain/error.h"
#include "leantrain/ops.h"
#include "leantrain/optim.h"

namespace lt {

AdamW::AdamW(std::vector<ParamGroup> groups, const AdamWOptions& o)
    : Optimizer(std::move(groups), o.lr, o.weight_decay, "adamw"), opt_(o) {
  LT_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1,
           "adamw: betas (" + std::to_string(o.beta1) + ", " + std::to_string(o.beta2) + ") out of range",
           "each beta must be in [0, 1)", "use e.g. 0.9 and 0.999");
  LT_CHECK(o.eps >= 0, "adamw: eps " + std::to_string(o.eps) + " is negative", "eps guards a division",
           "use e.g. 1e-8");
  if (o.state_dtype)
    LT_CHECK(is_floating(*o.state_dtype), "adamw: state dtype " + std::string(dtype_name(*o.state_dtype)),
             "moments must be floating", "use f32 or bf16");
}

std::vector<std::string> AdamW::state_names() const { return {"exp_avg", "exp_avg_sq"}; }

std::vector<Tensor> AdamW::make_state(const Tensor& p, Device device) const {
  DType t = opt_.state_dtype.value_or(p.dtype());
  return {zeros(p.shape(), t, device), zeros(p.shape(), t, device)};
}

void AdamW::update(const std::vector<Slot*>& slots, float grad_scale) {
  std::vector<Tensor> params, grads, m, v, kept;
  bool any_kept = false;
  for (Slot* s : slots) {
    params.push_back(s->param);
    grads.push_back(s->param.grad());
    m.push_back(s->state[0]);
    v.push_back(s->state[1]);
    kept.push_back(s->kept);
    any_kept = any_kept || s->kept.defined();
  }
  const Slot& first = *slots.front();
  AdamWArgs a{float(lr()), float(opt_.beta1), float(opt_.beta2), float(opt_.eps), float(first.weight_decay),
              first.step + 1, grad_scale};
  const std::vector<uint64_t> streams = sr_streams(slots);
  a.sr.streams = streams;
  if (any_kept) a.kept = kept;  // written by the update kernel, with the new values
  a.sumsq = measuring();
  backend_for(first.param.device()).adamw_step(params, grads, m, v, a);
}

}  // namespace lt
