#include <typeinfo>

#include "leantrain/autocast.h"
#include "leantrain/nn.h"

namespace lt::nn {

LayerNorm::LayerNorm(ParamFactory& pf, int64_t dim, double eps, bool bias) : eps_(eps) {
  weight_ = &register_parameter("weight", pf.make({dim}, Init::ones()));
  if (bias) bias_ = &register_parameter("bias", pf.make({dim}, Init::zeros()));
}

// Under autocast the f32 affine weights follow a 16-bit input; the kernel keeps its statistics in f32.
Tensor LayerNorm::forward(const Tensor& x) {
  return layer_norm(x, autocast_like(*weight_, x), bias_ ? autocast_like(*bias_, x) : Tensor(), eps_);
}

AddNormResult LayerNorm::forward_add(const Tensor& x, const Tensor& residual) {
  return add_layer_norm(x, residual, autocast_like(*weight_, x), bias_ ? autocast_like(*bias_, x) : Tensor(), eps_);
}

Tensor LayerNorm::forward_linear(const Tensor& x, const Tensor& w, const Tensor& b, bool weight_in_out) {
  if (w.dtype() != x.dtype()) return linear(autocast(forward(x)), w, b, weight_in_out);
  return layer_norm_linear(x, autocast_like(*weight_, x), bias_ ? autocast_like(*bias_, x) : Tensor(), eps_, w, b,
                           weight_in_out);
}

LinearGelu LayerNorm::forward_linear_gelu(const Tensor& x, const Tensor& w, const Tensor& b, bool weight_in_out) {
  if (w.dtype() != x.dtype()) return LinearGelu{linear(autocast(forward(x)), w, b, weight_in_out), Tensor()};
  return layer_norm_linear_gelu(x, autocast_like(*weight_, x), bias_ ? autocast_like(*bias_, x) : Tensor(), eps_, w,
                                b, weight_in_out);
}

LayerNorm* plain_layer_norm(UnaryModule* m) {
  return m && typeid(*m) == typeid(LayerNorm) && m->recomputed_or_unwrapped() ? static_cast<LayerNorm*>(m) : nullptr;
}

RMSNorm::RMSNorm(ParamFactory& pf, int64_t dim, double eps, bool unit_offset) : eps_(eps), unit_offset_(unit_offset) {
  weight_ = &register_parameter("weight", pf.make({dim}, unit_offset ? Init::zeros() : Init::ones()));
}

Tensor RMSNorm::forward(const Tensor& x) { return rms_norm(x, autocast_like(*weight_, x), eps_, unit_offset_); }

AddNormResult RMSNorm::forward_add(const Tensor& x, const Tensor& residual) {
  return add_rms_norm(x, residual, autocast_like(*weight_, x), eps_, unit_offset_);
}

}  // namespace lt::nn
