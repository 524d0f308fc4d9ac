#include "leantrain/nn.h"

namespace lt::nn {

LayerNorm::LayerNorm(ParamFactory& pf, int64_t dim, double eps, bool bias) : eps_(eps) {
  weight_ = &register_parameter("weight", pf.make({dim}, Init::ones()));
  if (bias) bias_ = &register_parameter("bias", pf.make({dim}, Init::zeros()));
}

Tensor LayerNorm::forward(const Tensor& x) { return layer_norm(x, *weight_, bias_ ? *bias_ : Tensor(), eps_); }

RMSNorm::RMSNorm(ParamFactory& pf, int64_t dim, double eps) : eps_(eps) {
  weight_ = &register_parameter("weight", pf.make({dim}, Init::ones()));
}

Tensor RMSNorm::forward(const Tensor& x) { return rms_norm(x, *weight_, eps_); }

}  // namespace lt::nn
