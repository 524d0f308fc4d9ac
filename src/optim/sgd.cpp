// SGD with momentum, dampening, Nesterov and (coupled) weight decay, as torch.optim.SGD.
#include "backend/backend.h"
#include "leantrain/error.h"
#include "leantrain/ops.h"
#include "leantrain/optim.h"

namespace lt {

SGD::SGD(std::vector<ParamGroup> groups, const SgdOptions& o)
    : Optimizer(std::move(groups), o.lr, o.weight_decay, "sgd"), opt_(o) {
  LT_CHECK(o.momentum >= 0, "sgd: momentum " + std::to_string(o.momentum) + " is negative",
           "momentum is a decay factor", "pass momentum >= 0");
  LT_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), "sgd: Nesterov momentum needs momentum > 0 and dampening 0",
           "got momentum " + std::to_string(o.momentum) + ", dampening " + std::to_string(o.dampening),
           "set momentum (e.g. 0.9) and no dampening, or turn Nesterov off");
  if (o.state_dtype)
    LT_CHECK(is_floating(*o.state_dtype), "sgd: state dtype " + std::string(dtype_name(*o.state_dtype)),
             "the momentum buffer must be floating", "use f32 or bf16");
}

std::vector<std::string> SGD::state_names() const {
  if (opt_.momentum == 0) return {};
  return {"momentum_buffer"};
}

std::vector<Tensor> SGD::make_state(const Tensor& p, Device device) const {
  if (opt_.momentum == 0) return {};
  return {zeros(p.shape(), opt_.state_dtype.value_or(p.dtype()), device)};
}

void SGD::update(const std::vector<Slot*>& slots, float grad_scale) {
  std::vector<Tensor> params, grads, bufs;
  for (Slot* s : slots) {
    params.push_back(s->param);
    grads.push_back(s->param.grad());
    if (!s->state.empty()) bufs.push_back(s->state[0]);
  }
  const Slot& first = *slots.front();
  SgdArgs a{float(lr()), float(opt_.momentum), float(opt_.dampening), float(first.weight_decay), opt_.nesterov,
            first.step == 0, grad_scale};
  const std::vector<uint64_t> streams = sr_streams(slots);
  a.sr.streams = streams;
  backend_for(first.param.device()).sgd_step(params, grads, bufs, a);
}

}  // namespace lt
