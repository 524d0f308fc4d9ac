#include "leantrain/nn.h"

namespace lt::nn {

PreNormBlock::PreNormBlock(const char* type, std::shared_ptr<UnaryModule> ln_1, std::shared_ptr<SelfAttention> attn,
                           std::shared_ptr<UnaryModule> ln_2, std::shared_ptr<UnaryModule> mlp, const BlockNames& names)
    : type_(type) {
  ln_1_ = register_module(names.ln_1, std::move(ln_1));
  attn_ = register_module(names.attn, std::move(attn));
  ln_2_ = register_module(names.ln_2, std::move(ln_2));
  mlp_ = register_module(names.mlp, std::move(mlp));
}

Tensor PreNormBlock::forward(const Tensor& x, const Tensor& mask) {
  Tensor h = add(x, (*attn_)((*ln_1_)(x), mask));
  return add(h, (*mlp_)((*ln_2_)(h)));
}

}  // namespace lt::nn
