// LoraLinear (leantrain/nn_lora.h). The update is scaled on its r-wide middle, (x A^T * s) B^T,
// rather than on the out-wide result as PEFT writes it: the same product, one pass over r
// columns instead of out, and no out-wide temporary.
#include <cmath>

#include "leantrain/autocast.h"
#include "leantrain/autograd.h"
#include "leantrain/error.h"
#include "leantrain/nn_lora.h"
#include "leantrain/nn_quant.h"
#include "leantrain/ops_lora.h"

namespace lt::nn {

std::optional<LinearShape> linear_shape(const Module& m) {
  if (auto* l = dynamic_cast<const Linear*>(&m))
    return LinearShape{l->in_features(), l->out_features(),
                       std::string(l->type_name()) == "Conv1D" ? WeightLayout::InOut : WeightLayout::OutIn};
  // QLoRA: an NF4 base holds the [out, in] weight of bitsandbytes' Linear4bit (Conv1D included).
  if (auto* q = dynamic_cast<const Nf4Linear*>(&m)) return LinearShape{q->in_features(), q->out_features(), WeightLayout::OutIn};
  return std::nullopt;
}

LoraLinear::LoraLinear(std::shared_ptr<UnaryModule> base, const LoraOptions& o, ParamFactory& pf)
    : base_(std::move(base)), opts_(o) {
  LT_CHECK(base_ != nullptr, "LoRA: no base module", "an adapter wraps a linear layer", "pass one");
  const std::optional<LinearShape> s = linear_shape(*base_);
  LT_CHECK(s.has_value(), std::string("LoRA on a ") + base_->type_name(), "an adapter wraps a linear layer",
           "target Linear (or Conv1D) modules only");
  shape_ = *s;
  LT_CHECK(o.rank > 0 && o.rank <= std::min(shape_.in, shape_.out),
           "LoRA rank " + std::to_string(o.rank) + " on a " + std::to_string(shape_.in) + " -> " +
               std::to_string(shape_.out) + " layer",
           "the rank must be in [1, min(in, out)]", "pass a smaller --lora-rank");
  LT_CHECK(std::isfinite(o.alpha) && o.alpha > 0, "LoRA alpha " + std::to_string(o.alpha), "it must be positive",
           "pass e.g. --lora-alpha 16");
  LT_CHECK(o.dropout >= 0 && o.dropout < 1, "LoRA dropout " + std::to_string(o.dropout), "it must be in [0, 1)",
           "pass e.g. --lora-dropout 0.05");
  // The base's own parameters, buffers and children, under their own names (see the header).
  for (auto& [name, t] : base_->named_parameters())
    if (name.find('.') == std::string::npos) {
      Tensor alias = t;
      if (alias.requires_grad()) alias.set_requires_grad(false);
      register_parameter(name, alias);
    }
  for (auto& [name, t] : base_->named_buffers())
    if (name.find('.') == std::string::npos) register_buffer(name, t);
  for (auto& [name, child] : base_->children()) register_module(name, child);
  // PEFT's init: kaiming_uniform_(A, a=sqrt(5)) = uniform(+-1/sqrt(in)), B = 0.
  const double bound = 1.0 / std::sqrt(double(shape_.in));
  lora_A_ = register_module("lora_A", std::make_shared<Linear>(
                                           pf, shape_.in, o.rank,
                                           LinearOptions{.bias = false, .weight_init = Init::uniform(bound)}));
  lora_B_ = register_module("lora_B", std::make_shared<Linear>(
                                           pf, o.rank, shape_.out, LinearOptions{.bias = false, .weight_init = Init::zeros()}));
  if (o.dropout > 0) dropout_ = register_module("lora_dropout", std::make_shared<Dropout>(o.dropout, pf.next_seed()));
}

namespace {
thread_local bool g_adapters_off = false;
}  // namespace

AdaptersOffScope::AdaptersOffScope() : prev_(g_adapters_off) { g_adapters_off = true; }
AdaptersOffScope::~AdaptersOffScope() { g_adapters_off = prev_; }
bool adapters_off() { return g_adapters_off; }

std::optional<LoraFactors> LoraLinear::fused_factors() const {
  if (dropout_ || lora_A_->forward_wrapper() || lora_B_->forward_wrapper()) return std::nullopt;
  return LoraFactors{autocast(lora_A_->weight()), autocast(lora_B_->weight()), scaling()};
}

Tensor LoraLinear::forward(const Tensor& x) {
  if (g_adapters_off) return (*base_)(x);
  // A plain [out, in] Linear base: the layer and its adapter as one op (leantrain/ops_lora.h).
  auto* base = plain_linear(base_.get());
  if (base && !base->weight_in_out())
    if (std::optional<LoraFactors> f = fused_factors())
      return lora_linear(autocast(x), autocast(base->weight()), autocast(base->bias()), {*f});
  return add((*base_)(x), update(x));
}

Tensor LoraLinear::update(const Tensor& x) {
  Tensor h = dropout_ ? (*dropout_)(x) : x;
  // lora_A/lora_B cast under autocast as every Linear does, so the update is in the base's dtype.
  return lora_B_->forward(scale(lora_A_->forward(h), scaling()));
}

Tensor lora_merged_weight(const LoraLinear& m) {
  auto* base = dynamic_cast<const Linear*>(&m.base());
  LT_CHECK(base != nullptr, std::string("merging a LoRA adapter into a ") + m.base().type_name(),
           "only a dense Linear base can take the merged weight", "merge into the 16- or 32-bit base model");
  NoGradGuard no_grad;
  Tensor delta = scale(matmul(cast(m.lora_B(), DType::F32), cast(m.lora_A(), DType::F32)), m.scaling());  // [out, in]
  if (m.shape().layout == WeightLayout::InOut) delta = contiguous(transpose(delta, 0, 1));
  return cast(add(cast(base->weight(), DType::F32), delta), base->weight().dtype());
}

}  // namespace lt::nn
