// Linear in both reference layouts. The Conv1D layout [in, out] (GPT-2) runs as x @ W + b so
// checkpoints load without a transpose; the torch layout [out, in] uses lt::linear.
#include <optional>
#include <typeinfo>

#include "autograd/unread_output.h"
#include "backend/dry_compute.h"
#include "leantrain/autocast.h"
#include "leantrain/error.h"
#include "leantrain/nn.h"

namespace lt::nn {

Linear::Linear(ParamFactory& pf, int64_t in, int64_t out, const LinearOptions& o)
    : in_(in), out_(out), layout_(o.layout) {
  LT_CHECK(in > 0 && out > 0, "Linear: features must be positive",
           "got in=" + std::to_string(in) + ", out=" + std::to_string(out), "check the model config");
  Shape ws = layout_ == WeightLayout::OutIn ? Shape{out, in} : Shape{in, out};
  weight_ = &register_parameter("weight", pf.make(ws, o.weight_init));
  if (o.bias) bias_ = &register_parameter("bias", pf.make({out}, o.bias_init));
}

Linear::Linear(Tensor weight, Tensor bias, WeightLayout layout) : layout_(layout) {
  LT_CHECK(weight.dim() == 2 && (!bias.defined() || bias.dim() == 1),
           "Linear: weight " + shape_str(weight.shape()) + (bias.defined() ? ", bias " + shape_str(bias.shape()) : ""),
           "a Linear takes a 2-D weight and a 1-D bias", "make them with those shapes");
  in_ = weight.size(layout == WeightLayout::OutIn ? 1 : 0);
  out_ = weight.size(layout == WeightLayout::OutIn ? 0 : 1);
  LT_CHECK(!bias.defined() || bias.size(0) == out_, "Linear: bias " + shape_str(bias.shape()),
           "it has one entry per output feature (" + std::to_string(out_) + ")", "make it that long");
  weight_ = &register_parameter("weight", std::move(weight));
  if (bias.defined()) bias_ = &register_parameter("bias", std::move(bias));
}

Tensor Linear::forward(const Tensor& x) {
  // Under autocast (the -mixed policies) the GEMM runs in 16-bit: see leantrain/autocast.h.
  return linear(autocast(x), autocast(*weight_), autocast(bias()), layout_ == WeightLayout::InOut);
}

Tensor Linear::forward_unread_output(const Tensor& x) {
  const Tensor xc = autocast(x), w = autocast(*weight_), b = autocast(bias());
  std::optional<DryCompute> dry;
  if (xc.is_contiguous()) dry.emplace(true), detail::count_unread_tail();
  return linear(xc, w, b, layout_ == WeightLayout::InOut);
}

Tensor Linear::forward_gelu_tanh(const Tensor& x) {
  return linear_gelu(autocast(x), autocast(*weight_), autocast(bias()), layout_ == WeightLayout::InOut);
}

LinearGelu Linear::forward_gelu_parts(const Tensor& x, GeluApprox approx) {
  return linear_gelu_parts(autocast(x), autocast(*weight_), autocast(bias()), approx, weight_in_out());
}

Tensor Linear::forward_after_gelu(const Tensor& pre, const Tensor& act, GeluApprox approx, bool keep_act,
                                  bool output_unread) {
  Tensor p = autocast(pre);
  // act is gelu(pre) only while the cast left pre as it was.
  const Tensor a = p.dtype() == pre.dtype() ? act : Tensor();
  // The casts run for real: the backward reads the 16-bit weight. So does a GELU computed here to
  // be kept.
  const Tensor w = autocast(*weight_), b = autocast(bias());
  std::optional<DryCompute> dry;
  if (output_unread && (a.defined() || !keep_act) && p.is_contiguous()) dry.emplace(true), detail::count_unread_tail();
  return gelu_linear(p, w, b, approx, weight_in_out(), a, keep_act);
}

Linear* plain_linear(UnaryModule* m) {
  return m && typeid(*m) == typeid(Linear) && !m->forward_wrapper() ? static_cast<Linear*>(m) : nullptr;
}

DType compute_dtype_of(const Tensor& w) {
  auto dt = autocast_dtype();
  return dt && w.dtype() == DType::F32 ? *dt : w.dtype();
}

}  // namespace lt::nn
