#include "leantrain/nn.h"

namespace lt::nn {

PreNormBlock::PreNormBlock(const char* type, std::shared_ptr<UnaryModule> ln_1, std::shared_ptr<SelfAttention> attn,
                           std::shared_ptr<UnaryModule> ln_2, std::shared_ptr<UnaryModule> mlp, const BlockNames& names)
    : type_(type) {
  ln_1_ = register_child(names.ln_1, std::move(ln_1));
  attn_ = register_child(names.attn, std::move(attn));
  ln_2_ = register_child(names.ln_2, std::move(ln_2));
  mlp_ = register_child(names.mlp, std::move(mlp));
}

// Each LayerNorm folds into the linear after it (layer_norm_linear: the normalised rows are
// recomputed in the backward, not saved) when the norm and the projection are plain modules
// without forward wrappers; the residual add then runs on its own (it saves nothing). Else the
// residual add and ln_2 run as one fused op (add_layer_norm: one pass each way, the same tensors
// saved) unless ln_2 has a forward wrapper (a checkpointed ln_2 must run through it).
Tensor PreNormBlock::forward(const Tensor& x, const Tensor& mask) {
  Tensor a;
  if (LayerNorm* ln = plain_layer_norm(ln_1_.get()); ln && !attn_->forward_wrapper())
    a = attn_->forward_normed(x, *ln, mask);
  if (!a.defined()) a = (*attn_)((*ln_1_)(x), mask);
  auto* mlp = dynamic_cast<Mlp*>(mlp_.get());
  if (LayerNorm* ln = plain_layer_norm(ln_2_.get()); ln && mlp && !mlp->forward_wrapper()) {
    Tensor h = add(x, a);
    Tensor m = mlp->forward_normed(h, *ln);
    if (m.defined()) return add(h, m);
    return add(h, (*mlp_)((*ln_2_)(h)));
  }
  if (!ln_2_->forward_wrapper()) {
    if (auto* ln = dynamic_cast<LayerNorm*>(ln_2_.get())) {
      auto [h, y] = ln->forward_add(a, x);
      return add(h, (*mlp_)(y));
    }
    if (auto* ln = dynamic_cast<RMSNorm*>(ln_2_.get())) {
      auto [h, y] = ln->forward_add(a, x);
      return add(h, (*mlp_)(y));
    }
  }
  Tensor h = add(x, a);
  return add(h, (*mlp_)((*ln_2_)(h)));
}

}  // namespace lt::nn
