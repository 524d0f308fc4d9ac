// LLaMA-family attention and MLP (leantrain/nn_llama.h). Each projection group (q | k | v,
// gate | up) is made one weight after another, so one GEMM runs over stacked_rows() of them; when
// a projection has been wrapped (a checkpointed or sharded Linear) or replaced by another module,
// its module is called instead, so every feature that acts on Linears still sees its calls. LoRA
// adapters on plain Linears keep the one GEMM and add their updates after it.
#include <optional>
#include <typeinfo>

#include "autograd/unread_output.h"
#include "backend/dry_compute.h"
#include "leantrain/autocast.h"
#include "leantrain/error.h"
#include "leantrain/nn_llama.h"
#include "leantrain/nn_lora.h"
#include "leantrain/ops_lora.h"

namespace lt::nn {

namespace {

// The plain Linear behind a child, or nullptr when its forward must run as a call (a wrapper is
// installed, or it is another module).
Linear* plain_linear(const Child<UnaryModule>& c) {
  UnaryModule* m = c.get();
  if (!m || typeid(*m) != typeid(Linear) || m->forward_wrapper()) return nullptr;
  return static_cast<Linear*>(m);
}

// `m` as a plain RMSNorm (not a subclass, no forward wrapper), else nullptr: the fused per-head
// norm bypasses its forward.
RMSNorm* plain_rms_norm(UnaryModule* m) {
  if (!m || typeid(*m) != typeid(RMSNorm) || m->forward_wrapper()) return nullptr;
  return static_cast<RMSNorm*>(m);
}

// The Linear whose weight a fused GEMM may use for child `c`: a plain Linear, or the plain base
// of a LoRA adapter (whose update is then added after the GEMM); nullptr otherwise.
Linear* fusable_linear(const Child<UnaryModule>& c, LoraLinear** lora) {
  *lora = nullptr;
  if (Linear* l = plain_linear(c)) return l;
  auto* a = dynamic_cast<LoraLinear*>(c.get());
  if (!a || a->forward_wrapper() || a->base().forward_wrapper() || typeid(a->base()) != typeid(Linear)) return nullptr;
  *lora = a;
  return static_cast<Linear*>(&a->base());
}

// autocast(stacked_rows(ws)), or, when autocast hands out registered 16-bit copies of all of
// them (fsdp's gathered copies, which lie back to back in their unit's store), the stack of those:
// the f32 weights may have no memory on this rank. Kept casts (--keep-casts) the same:
// the optimizer places a stack's kept copies back to back (Optimizer::ensure_kept), so their
// stack is a view and the step casts nothing.
Tensor autocast_stacked(const std::vector<Tensor>& ws) {
  if (const std::optional<DType> dt = autocast_dtype()) {
    std::vector<Tensor> copies;
    for (const Tensor& w : ws)
      if (const Tensor* c = detail::precast_of(w, *dt)) copies.push_back(*c);
    if (copies.size() == ws.size()) return stacked_copies(copies, ws);
    if (ws.size() > 1)
      if (std::vector<Tensor> kept = detail::kept_casts_of(ws, *dt); !kept.empty()) return stacked_copies(kept, ws);
  }
  return autocast(stacked_rows(ws));
}

}  // namespace

Tensor fused_linear(const Tensor& x, const std::vector<const Child<UnaryModule>*>& children) {
  std::vector<Tensor> ws, bs;
  std::vector<LoraLinear*> loras;
  for (const Child<UnaryModule>* c : children) {
    LoraLinear* lora = nullptr;
    Linear* l = fusable_linear(*c, &lora);
    if (!l) return Tensor();
    if (lora) loras.push_back(lora);
    ws.push_back(l->weight());
    if (l->bias().defined()) bs.push_back(l->bias());
  }
  if (!bs.empty() && bs.size() != ws.size()) return Tensor();
  if (!loras.empty() && loras.size() != children.size()) return Tensor();
  // With an adapter on every projection, the stacked GEMM and the adapters are one op whose
  // adapters add their products into their columns (leantrain/ops_lora.h).
  std::vector<LoraFactors> factors;
  if (!loras.empty() && !adapters_off())
    for (LoraLinear* a : loras)
      if (std::optional<LoraFactors> f = a->fused_factors()) factors.push_back(*f);
  const Tensor b = bs.empty() ? Tensor() : autocast_stacked(bs);
  if (!factors.empty() && factors.size() == loras.size()) return lora_linear(autocast(x), autocast_stacked(ws), b, factors);
  Tensor y = linear(autocast(x), autocast_stacked(ws), b);
  if (loras.empty() || adapters_off()) return y;
  std::vector<Tensor> updates;
  for (LoraLinear* a : loras) updates.push_back(a->update(x));
  return add(y, concat(updates, -1));
}

DecoderSelfAttention::DecoderSelfAttention(ParamFactory& pf, const DecoderAttentionOptions& o,
                                           std::shared_ptr<RotaryEmbedding> rope)
    : SelfAttention(o.heads * o.head_dim, o.heads, true),
      kv_heads_(o.kv_heads),
      head_dim_(o.head_dim),
      output_gate_(o.output_gate),
      type_(o.type),
      rope_(std::move(rope)) {
  LT_CHECK(o.kv_heads > 0 && o.heads % o.kv_heads == 0,
           "attention: " + std::to_string(o.heads) + " heads and " + std::to_string(o.kv_heads) + " key/value heads",
           "each key/value head serves an equal group of query heads",
           "use num_key_value_heads dividing num_attention_heads");
  LT_CHECK(rope_ && rope_->head_dim() > 0 && rope_->head_dim() <= o.head_dim,
           "attention: head dim " + std::to_string(o.head_dim) + " and rotary dim " +
               std::to_string(rope_ ? rope_->head_dim() : 0),
           "RoPE rotates the first dims of each head, at most all of them",
           "build the rotary embedding for the head dim (or a part of it)");
  const int64_t q = o.heads * o.head_dim, kv = o.kv_heads * o.head_dim, qrows = o.output_gate ? 2 * q : q;
  // Weights first, one after another (one GEMM), then the biases (one stack).
  Tensor qw = pf.make({qrows, o.hidden}, o.init), kw = pf.make({kv, o.hidden}, o.init), vw = pf.make({kv, o.hidden}, o.init);
  Tensor qb, kb, vb;
  if (o.qkv_bias) qb = pf.make({qrows}, Init::zeros()), kb = pf.make({kv}, Init::zeros()), vb = pf.make({kv}, Init::zeros());
  q_proj_ = register_child<UnaryModule>("q_proj", std::make_shared<Linear>(qw, qb));
  k_proj_ = register_child<UnaryModule>("k_proj", std::make_shared<Linear>(kw, kb));
  v_proj_ = register_child<UnaryModule>("v_proj", std::make_shared<Linear>(vw, vb));
  core_ = register_child("core", std::make_shared<AttentionCore>(o.heads, o.kv_heads, o.head_dim, true, o.scale, o.window));
  o_proj_ = register_child<UnaryModule>(
      "o_proj", std::make_shared<Linear>(pf, q, o.hidden, LinearOptions{.bias = o.o_bias, .weight_init = o.init}));
  if (o.qk_norm) {  // after o_proj, as transformers' Qwen3Attention registers them
    q_norm_ = register_child<UnaryModule>(
        "q_norm", std::make_shared<RMSNorm>(pf, o.head_dim, o.qk_norm_eps, o.unit_offset_norms));
    k_norm_ = register_child<UnaryModule>(
        "k_norm", std::make_shared<RMSNorm>(pf, o.head_dim, o.qk_norm_eps, o.unit_offset_norms));
  }
}

// transformers' Qwen3Attention: q_norm(q_proj(x).view(..., H, D)), k_norm likewise, before RoPE.
// Plain RMSNorms of one eps and offset: one op over the packed q | k | v (rms_norm_heads, no
// copies), their weights cast as RMSNorm::forward casts them. Otherwise (a wrapped or replaced
// norm) each module is called on its heads as [B, T, n, D] copies, put back in the q | k | v layout.
Tensor DecoderSelfAttention::norm_heads(const Tensor& qkv) {
  // A parameter without memory yet (an unmaterialized flat store) takes the module call, whose error names it.
  auto ready = [](const RMSNorm* n) {
    return n && (n->weight().storage() != nullptr || detail::has_precast(n->weight()));
  };
  RMSNorm* qn = plain_rms_norm(q_norm_.get());
  RMSNorm* kn = plain_rms_norm(k_norm_.get());
  if (ready(qn) && ready(kn) && qn->eps() == kn->eps() && qn->unit_offset() == kn->unit_offset())
    return rms_norm_heads(qkv, autocast_like(qn->weight(), qkv), heads_, autocast_like(kn->weight(), qkv), kv_heads_,
                          qn->eps(), qn->unit_offset());
  const int64_t B = qkv.size(0), T = qkv.size(1), D = head_dim_, q = heads_ * D, kv = kv_heads_ * D;
  auto normed = [&](UnaryModule& norm, int64_t start, int64_t n) {
    Tensor h = reshape(contiguous(slice(qkv, 2, start, start + n * D)), {B, T, n, D});
    return reshape(norm(h), {B, T, n * D});
  };
  return concat({normed(*q_norm_, 0, heads_), normed(*k_norm_, q, kv_heads_), slice(qkv, 2, q + kv, q + 2 * kv)}, 2);
}

Tensor DecoderSelfAttention::project(const Tensor& x) {
  Tensor qkv = fused_linear(x, {&q_proj_, &k_proj_, &v_proj_});
  if (qkv.defined()) return qkv;
  return concat({(*q_proj_)(x), (*k_proj_)(x), (*v_proj_)(x)}, -1);
}

Tensor DecoderSelfAttention::forward(const Tensor& x, const TokenMask& mask) {
  LT_CHECK(x.dim() == 3, "attention: input shape " + shape_str(x.shape()), "expected [B, T, hidden]",
           "pass a batch of sequences");
  // q and k rotated, v passed through, in one op that saves nothing: the attention keeps the
  // rotated buffer, the only tensor of this layer's forward that the backward reads.
  Tensor p = project(x);
  Tensor gate;
  if (output_gate_) {
    // Each head's D query columns, then its D gate columns: split into q | k | v and the gate.
    const int64_t B = p.size(0), T = p.size(1), D = head_dim_, q = heads_ * D;
    Tensor qg = reshape(slice(p, 2, 0, 2 * q), {B, T, heads_, 2 * D});
    gate = reshape(contiguous(slice(qg, 3, D, 2 * D)), {B, T, q});
    p = concat({reshape(contiguous(slice(qg, 3, 0, D)), {B, T, q}), slice(p, 2, 2 * q, p.size(2))}, 2);
  }
  if (q_norm_.get()) p = norm_heads(p);
  // Packed documents turn by each token's position inside its document (the same doc_pos that
  // makes attention block-diagonal), as transformers' position_ids of a flattened batch.
  Tensor qkv = mask.doc_pos.defined()
                   ? rotary_embedding_packed(p, rope_->inv_freq(), heads_ + kv_heads_, mask.doc_pos, head_dim_)
                   : rotary_embedding_packed(p, rope_->inv_freq(), heads_ + kv_heads_, rope_->pos_offset(), head_dim_);
  Tensor a = attend(qkv, mask);
  if (gate.defined()) a = mul(a, sigmoid(gate));  // transformers: attn_output * torch.sigmoid(gate)
  return (*o_proj_)(a);
}

GatedMlp::GatedMlp(ParamFactory& pf, const GatedMlpOptions& o) : type_(o.type), act_(o.act) {
  const int64_t c = o.hidden, f = o.intermediate;
  Tensor gw = pf.make({f, c}, o.init), uw = pf.make({f, c}, o.init);
  Tensor gb, ub;
  if (o.bias) gb = pf.make({f}, Init::zeros()), ub = pf.make({f}, Init::zeros());
  gate_proj_ = register_child<UnaryModule>("gate_proj", std::make_shared<Linear>(gw, gb));
  up_proj_ = register_child<UnaryModule>("up_proj", std::make_shared<Linear>(uw, ub));
  down_proj_ = register_child<UnaryModule>(
      "down_proj", std::make_shared<Linear>(pf, f, c, LinearOptions{.bias = o.bias, .weight_init = o.init}));
}

Tensor GatedMlp::forward(const Tensor& x) { return forward_impl(x, false); }

Tensor GatedMlp::forward_unread_output(const Tensor& x) {
  if (!plain_linear(down_proj_)) return Tensor();
  return forward_impl(x, true);
}

Tensor GatedMlp::forward_impl(const Tensor& x, bool unread_output) {
  Tensor gate_up = fused_linear(x, {&gate_proj_, &up_proj_});
  // down_proj over the activation in one op that recomputes the activation in its backward
  // instead of keeping it: the MLP keeps x and gate | up, nothing F wide besides.
  Linear* down = plain_linear(down_proj_);
  if (gate_up.defined() && down) {
    // The casts run for real (the backward reads the 16-bit weight); the product only feeds the
    // unread output, and swiglu_linear's backward reads gate | up and the weight, not its result.
    const Tensor w = autocast(down->weight()), b = autocast(down->bias());
    std::optional<DryCompute> dry;
    if (unread_output) dry.emplace(true), detail::count_unread_tail();
    return swiglu_linear(gate_up, w, b, act_);
  }
  if (unread_output) return Tensor();  // stacked gate | up unavailable: the caller runs forward()
  Tensor h = gate_up.defined() ? swiglu_packed(gate_up, act_) : swiglu((*gate_proj_)(x), (*up_proj_)(x), act_);
  return (*down_proj_)(h);
}

}  // namespace lt::nn
