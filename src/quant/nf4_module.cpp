// Nf4Linear: the state's tensors are buffers (so the store, checkpoints and the planner see
// them); the forward is quant/nf4_linear.h's op. A bias that trains is added after the op, which
// takes only frozen biases (bitsandbytes' Linear4bit keeps its bias an ordinary parameter).
#include "leantrain/autocast.h"
#include "leantrain/error.h"
#include "leantrain/nn_quant.h"
#include "quant/nf4_linear.h"

namespace lt::nn {

Nf4Linear::Nf4Linear(Nf4Weight q, Tensor bias) : q_(std::move(q)) {
  LT_CHECK(q_.shape.size() == 2, "Nf4Linear: a weight of shape " + shape_str(q_.shape),
           "an NF4 linear layer holds an [out, in] weight", "quantise a 2-d weight");
  LT_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == q_.shape[0]),
           "Nf4Linear: bias " + (bias.defined() ? shape_str(bias.shape()) : std::string("?")),
           "it has one entry per output feature (" + std::to_string(q_.shape[0]) + ")", "make it that long");
  codes_ = &register_buffer("weight", reshape(q_.codes, {q_.codes.numel(), 1}));
  absmax_ = &register_buffer("weight_absmax", q_.absmax_codes);
  nested_absmax_ = &register_buffer("weight_nested_absmax", q_.nested_absmax);
  if (bias.defined()) bias_ = &register_parameter("bias", std::move(bias));
  q_.codes = Tensor();
  q_.absmax_codes = Tensor();
  q_.nested_absmax = Tensor();
}

Nf4Weight Nf4Linear::state() const {
  Nf4Weight q = q_;
  q.codes = reshape(*codes_, {codes_->numel()});
  q.absmax_codes = *absmax_;
  q.nested_absmax = *nested_absmax_;
  return q;
}

void Nf4Linear::set_host_state(float offset, std::vector<float> nested_map, DType dtype) {
  q_.offset = offset;
  q_.nested_map = std::move(nested_map);
  q_.dtype = dtype;
}

Tensor Nf4Linear::forward(const Tensor& x) {
  const Tensor in = autocast(x);
  const Tensor b = autocast(bias());
  if (b.defined() && b.requires_grad()) return add(nf4_linear(in, state()), b);
  return nf4_linear(in, state(), b);
}

}  // namespace lt::nn
