// Builds an optimizer from a run's config, and the usual decay / no-decay parameter split.
#include "leantrain/error.h"
#include "leantrain/optim.h"
#include "leantrain/optim_lean.h"

namespace lt {

namespace {
std::unique_ptr<Optimizer> make_bare(const OptimizerConfig& c, std::vector<ParamGroup> groups) {
  switch (c.kind) {
  case OptimizerKind::AdamW: {
    AdamWOptions o;
    o.lr = c.lr;
    o.beta1 = c.beta1;
    o.beta2 = c.beta2;
    o.eps = c.eps;
    o.weight_decay = c.weight_decay;
    o.state_dtype = c.state_dtype;
    return std::make_unique<AdamW>(std::move(groups), o);
  }
  case OptimizerKind::Sgd: {
    SgdOptions o;
    o.lr = c.lr;
    o.momentum = c.momentum;
    o.dampening = c.dampening;
    o.weight_decay = c.weight_decay;
    o.nesterov = c.nesterov;
    o.state_dtype = c.state_dtype;
    return std::make_unique<SGD>(std::move(groups), o);
  }
  case OptimizerKind::Lion: {
    LionOptions o;
    o.lr = c.lr;
    o.beta1 = c.lion_beta1;
    o.beta2 = c.lion_beta2;
    o.weight_decay = c.weight_decay;
    o.state_dtype = c.state_dtype;
    return std::make_unique<Lion>(std::move(groups), o);
  }
  default: break;
  }
  if (is_eight_bit(c.kind))
    LT_CHECK(!c.state_dtype, name_of(c.kind) + " takes no state dtype (" + dtype_name(*c.state_dtype) + " was asked)",
             "its states are 8-bit codes, and tensors under min_8bit_size elements keep f32 states",
             "drop the state dtype, or use adamw or lion with bf16 states");
  if (c.kind == OptimizerKind::AdamW8bit) {
    AdamW8bitOptions o;
    o.lr = c.lr;
    o.beta1 = c.beta1;
    o.beta2 = c.beta2;
    o.eps = c.eps;
    o.weight_decay = c.weight_decay;
    o.min_8bit_size = c.min_8bit_size;
    return std::make_unique<AdamW8bit>(std::move(groups), o);
  }
  if (c.kind == OptimizerKind::Lion8bit) {
    Lion8bitOptions o;
    o.lr = c.lr;
    o.beta1 = c.lion_beta1;
    o.beta2 = c.lion_beta2;
    o.weight_decay = c.weight_decay;
    o.min_8bit_size = c.min_8bit_size;
    return std::make_unique<Lion8bit>(std::move(groups), o);
  }
  fail("optimizer kind " + std::to_string(int(c.kind)), "not one leantrain builds", "use " + choice_list<OptimizerKind>());
}
}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& c, std::vector<ParamGroup> groups) {
  std::unique_ptr<Optimizer> o = make_bare(c, std::move(groups));
  o->set_master_weights(c.master_weights);
  o->set_stochastic_rounding(c.stochastic_rounding, c.seed);
  o->set_state_device(c.state_device);
  return o;
}

std::vector<ParamGroup> decay_groups(const std::vector<NamedTensor>& params) {
  ParamGroup decay, no_decay;
  no_decay.weight_decay = 0.0;
  for (const auto& p : params) (p.second.dim() >= 2 ? decay : no_decay).params.push_back(p);
  std::vector<ParamGroup> out;
  if (!decay.params.empty()) out.push_back(std::move(decay));
  if (!no_decay.params.empty()) out.push_back(std::move(no_decay));
  return out;
}

}  // namespace lt
