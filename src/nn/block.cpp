#include <optional>
#include <typeinfo>

#include "autograd/unread_output.h"
#include "backend/dry_compute.h"
#include "leantrain/error.h"
#include "leantrain/nn.h"
#include "leantrain/nn_llama.h"

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
Tensor PreNormBlock::forward(const Tensor& x, const TokenMask& mask) {
  if (post_attn_) return forward_post_norms(x, mask);
  // A checkpointed block's recomputation: nothing reads the block's output, so the residual add
  // that makes it, and the MLP's last product when the MLP can leave it, run dry (Note [Unread
  // region output]); their backward nodes read neither result.
  const bool unread = detail::output_unread(static_cast<const Module*>(this)) && !mlp_->forward_wrapper();
  auto residual = [unread](const Tensor& h, const Tensor& m) {
    std::optional<DryCompute> dry;
    if (unread) dry.emplace(true);
    return add(h, m);
  };
  Tensor a;
  if (LayerNorm* ln = plain_layer_norm(ln_1_.get()); lean_saves_ && ln && !attn_->forward_wrapper())
    a = attn_->forward_normed(x, *ln, mask);
  if (!a.defined()) a = (*attn_)((*ln_1_)(x), mask);
  auto* mlp = dynamic_cast<Mlp*>(mlp_.get());
  if (LayerNorm* ln = plain_layer_norm(ln_2_.get()); lean_saves_ && ln && mlp && !mlp->forward_wrapper()) {
    Tensor h = add(x, a);
    Tensor m = mlp->forward_normed(h, *ln, unread);
    if (m.defined()) return residual(h, m);
    return add(h, (*mlp_)((*ln_2_)(h)));
  }
  if (!ln_2_->forward_wrapper()) {
    if (auto* ln = dynamic_cast<LayerNorm*>(ln_2_.get())) {
      auto [h, y] = ln->forward_add(a, x);
      if (unread && mlp) return residual(h, mlp->forward_unread_output(y));
      return add(h, (*mlp_)(y));
    }
    if (auto* ln = dynamic_cast<RMSNorm*>(ln_2_.get())) {
      auto [h, y] = ln->forward_add(a, x);
      if (unread)
        if (auto* gated = dynamic_cast<GatedMlp*>(mlp_.get()))
          if (Tensor m = gated->forward_unread_output(y); m.defined()) return residual(h, m);
      return add(h, (*mlp_)(y));
    }
  }
  Tensor h = add(x, a);
  return add(h, (*mlp_)((*ln_2_)(h)));
}

void PreNormBlock::set_post_norms(std::shared_ptr<UnaryModule> post_attn, std::shared_ptr<UnaryModule> post_mlp,
                                  const std::string& post_attn_name, const std::string& post_mlp_name) {
  LT_CHECK(post_attn && post_mlp && !post_attn_, std::string(type_) + ": set_post_norms",
           "it takes two norms, once", "pass both norms when building the block");
  post_attn_ = register_child(post_attn_name, std::move(post_attn));
  post_mlp_ = register_child(post_mlp_name, std::move(post_mlp));
}

// The residual add and ln_2 still run as one op (add_rms_norm) when ln_2 is a plain RMSNorm.
Tensor PreNormBlock::forward_post_norms(const Tensor& x, const TokenMask& mask) {
  Tensor a = (*post_attn_)((*attn_)((*ln_1_)(x), mask));
  if (auto* ln = dynamic_cast<RMSNorm*>(ln_2_.get()); ln && !ln_2_->forward_wrapper()) {
    auto [h, y] = ln->forward_add(a, x);
    return add(h, (*post_mlp_)((*mlp_)(y)));
  }
  Tensor h = add(x, a);
  return add(h, (*post_mlp_)((*mlp_)((*ln_2_)(h))));
}

bool PreNormBlock::splits_residual() const {
  auto plain_ln = [](UnaryModule* m) { return m && typeid(*m) == typeid(LayerNorm) && !m->forward_wrapper(); };
  return !post_attn_ && !lean_saves_ && !forward_wrapper() && plain_ln(ln_1_.get()) && plain_ln(ln_2_.get());
}

std::pair<Tensor, Tensor> PreNormBlock::forward_split(const Tensor& h_in, const Tensor& m_in, const TokenMask& mask) {
  LT_CHECK(splits_residual(), std::string(type_) + ": forward_split on a block that does not split its residual",
           "it needs lean saves off, no forward wrappers and LayerNorms", "call the block through operator()");
  auto* ln_1 = static_cast<LayerNorm*>(ln_1_.get());
  auto* ln_2 = static_cast<LayerNorm*>(ln_2_.get());
  Tensor x, n;
  if (m_in.defined()) {
    auto [s, y] = ln_1->forward_add(h_in, m_in);  // the previous block's h + m, then ln_1
    x = std::move(s);
    n = std::move(y);
  } else {
    x = h_in;
    n = ln_1->forward(x);
  }
  Tensor a = (*attn_)(n, mask);
  auto [h, y] = ln_2->forward_add(a, x);
  return {h, (*mlp_)(y)};
}

int64_t set_lean_saves(Module& root, bool on) {
  int64_t n = 0;
  std::function<void(Module&)> visit = [&](Module& m) {
    if (auto* b = dynamic_cast<PreNormBlock*>(&m)) b->set_lean_saves(on), ++n;
    if (auto* mlp = dynamic_cast<Mlp*>(&m)) mlp->set_lean_saves(on), ++n;
    for (auto& [name, child] : m.children()) visit(*child);
  };
  visit(root);
  return n;
}

}  // namespace lt::nn
