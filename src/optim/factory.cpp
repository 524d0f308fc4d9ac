// Builds an optimizer from a run's config, and the usual decay / no-decay parameter split.
#include "leantrain/error.h"
#include "leantrain/optim.h"

namespace lt {

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& c, std::vector<ParamGroup> groups) {
  if (c.name == "adamw") {
    AdamWOptions o;
    o.lr = c.lr;
    o.beta1 = c.beta1;
    o.beta2 = c.beta2;
    o.eps = c.eps;
    o.weight_decay = c.weight_decay;
    o.state_dtype = c.state_dtype;
    return std::make_unique<AdamW>(std::move(groups), o);
  }
  if (c.name == "sgd") {
    SgdOptions o;
    o.lr = c.lr;
    o.momentum = c.momentum;
    o.dampening = c.dampening;
    o.weight_decay = c.weight_decay;
    o.nesterov = c.nesterov;
    o.state_dtype = c.state_dtype;
    return std::make_unique<SGD>(std::move(groups), o);
  }
  fail("unknown optimizer '" + c.name + "'", "leantrain has adamw and sgd", "use --optimizer adamw or sgd");
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
