// Linear in both reference layouts. The Conv1D layout [in, out] (GPT-2) runs as x @ W + b so
// checkpoints load without a transpose; the torch layout [out, in] uses lt::linear.
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

Tensor Linear::forward(const Tensor& x) {
  // Under autocast (the -mixed policies) the GEMM runs in 16-bit: see leantrain/autocast.h.
  return linear(autocast(x), autocast(*weight_), autocast(bias()), layout_ == WeightLayout::InOut);
}

Tensor Linear::forward_gelu_tanh(const Tensor& x) {
  return linear_gelu(autocast(x), autocast(*weight_), autocast(bias()), layout_ == WeightLayout::InOut);
}

}  // namespace lt::nn
