// Self-attention in the two reference namings. Both produce one fused projection [B, T, 3C]
// (q | k | v along the last dim, as GPT-2's c_attn and torch's in_proj do) and share attend().
#include <cmath>
#include <typeinfo>

#include "autograd/kept_outputs.h"

#include "leantrain/autocast.h"
#include "leantrain/error.h"
#include "leantrain/nn.h"

namespace lt::nn {

SelfAttention::SelfAttention(int64_t dim, int64_t heads, bool causal) : dim_(dim), heads_(heads), causal_(causal) {
  LT_CHECK(heads > 0 && dim % heads == 0, "attention: hidden size " + std::to_string(dim),
           "is not divisible by " + std::to_string(heads) + " heads", "choose a head count that divides it");
}

Tensor AttentionCore::forward(const Tensor& qkv, const TokenMask& mask) const {
  const int64_t width = (heads_ + 2 * kv_heads_) * head_dim_;
  LT_CHECK(qkv.dim() == 3 && qkv.size(2) == width, "attention: input must be [B, T, " + std::to_string(width) + "]",
           "the fused projection has shape " + shape_str(qkv.shape()), "pass a batch of sequences");
  // The kernels read q, k, v straight out of qkv and write the heads merged: no copies, and
  // nothing saved but qkv, the output and the log-sum-exp (docs/memory-model.md).
  // Grouped queries read their K/V head in place (no repeated K/V); dK/dV summed per group.
  if (window_ > 0 || mask.doc_pos.defined())
    return self_attention_packed(qkv, heads_, kv_heads_, AttentionMask{causal_, mask.key_padding, window_, mask.doc_pos},
                                 scale_);
  return self_attention_packed(qkv, heads_, kv_heads_, causal_, mask.key_padding, scale_);
}

double AttentionCore::forward_flops(const Shape& qkv) const {
  if (qkv.size() != 3) return 0;
  const double b = double(qkv[0]), t = double(qkv[1]), c = double(heads_ * head_dim_);
  if (window_ > 0 && window_ < qkv[1]) {  // query i sees min(i + 1, window) keys
    const double w = double(window_), keys = w * (w + 1) / 2 + (t - w) * w;
    return 4 * b * keys * c;
  }
  return 4 * b * t * t * c * (causal_ ? 0.5 : 1.0);
}

Tensor SelfAttention::attend_project(const Tensor& qkv, const TokenMask& mask, UnaryModule& proj) const {
  Linear* lin = plain_linear(&proj);
  const bool plain_core = core_.get() && typeid(*core_.get()) == typeid(AttentionCore) && !core_->forward_wrapper();
  if (lin && plain_core && detail::active_kept_outputs() == nullptr && qkv.dim() == 3 && qkv.size(1) <= dim_ &&
      compute_dtype_of(lin->weight()) == qkv.dtype())
    return attention_linear(qkv, heads_, heads_, AttentionMask{causal_, mask.key_padding, 0, mask.doc_pos},
                            autocast(lin->weight()), autocast(lin->bias()), lin->weight_in_out());
  return proj(attend(qkv, mask));
}

CausalSelfAttention::CausalSelfAttention(ParamFactory& pf, int64_t dim, int64_t heads, double resid_dropout,
                                         const Init& proj_init)
    : SelfAttention(dim, heads, true) {
  c_attn_ = register_child<UnaryModule>("c_attn", std::make_shared<Linear>(pf, dim, 3 * dim,
                                                                LinearOptions{.layout = WeightLayout::InOut}));
  register_core();
  c_proj_ = register_child<UnaryModule>(
      "c_proj", std::make_shared<Linear>(pf, dim, dim, LinearOptions{.layout = WeightLayout::InOut, .weight_init = proj_init}));
  drop_ = register_child<UnaryModule>("resid_dropout", std::make_shared<Dropout>(resid_dropout, pf.next_seed()));
}

Tensor CausalSelfAttention::forward(const Tensor& x, const TokenMask& mask) {
  return (*drop_)((*c_proj_)(attend((*c_attn_)(x), mask)));
}

Tensor CausalSelfAttention::forward_normed(const Tensor& x, LayerNorm& ln, const TokenMask& mask) {
  Linear* c_attn = plain_linear(c_attn_.get());
  if (!c_attn || compute_dtype_of(c_attn->weight()) != x.dtype()) return Tensor();
  Tensor qkv = ln.forward_linear(x, autocast(c_attn->weight()), autocast(c_attn->bias()), c_attn->weight_in_out());
  return (*drop_)(attend_project(qkv, mask, *c_proj_));
}

MultiheadSelfAttention::MultiheadSelfAttention(ParamFactory& pf, int64_t dim, int64_t heads, bool causal)
    : SelfAttention(dim, heads, causal) {
  // torch.nn.MultiheadAttention's init: xavier in_proj, zero biases, kaiming-uniform out_proj.
  in_proj_weight_ = &register_parameter("in_proj_weight", pf.make({3 * dim, dim}, Init::xavier_uniform(dim, 3 * dim)));
  in_proj_bias_ = &register_parameter("in_proj_bias", pf.make({3 * dim}, Init::zeros()));
  register_core();
  out_proj_ = register_child<UnaryModule>(
      "out_proj", std::make_shared<Linear>(pf, dim, dim, LinearOptions{.weight_init = Init::uniform(1.0 / std::sqrt(double(dim)))}));
}

Tensor MultiheadSelfAttention::forward(const Tensor& x, const TokenMask& mask) {
  LT_CHECK(x.dim() == 3 && x.size(2) == dim_, "attention: input shape " + shape_str(x.shape()),
           "expected [B, T, " + std::to_string(dim_) + "]", "check the hidden size");
  Tensor qkv = linear(autocast(x), autocast(*in_proj_weight_), autocast(*in_proj_bias_));
  return (*out_proj_)(attend(qkv, mask));
}

Tensor MultiheadSelfAttention::forward_normed(const Tensor& x, LayerNorm& ln, const TokenMask& mask) {
  if (compute_dtype_of(*in_proj_weight_) != x.dtype()) return Tensor();
  LT_CHECK(x.dim() == 3 && x.size(2) == dim_, "attention: input shape " + shape_str(x.shape()),
           "expected [B, T, " + std::to_string(dim_) + "]", "check the hidden size");
  Tensor qkv = ln.forward_linear(x, autocast(*in_proj_weight_), autocast(*in_proj_bias_), false);
  return attend_project(qkv, mask, *out_proj_);
}

}  // namespace lt::nn
