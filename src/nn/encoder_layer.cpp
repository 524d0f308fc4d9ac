// BERT-family post-norm encoder layers (leantrain/nn_encoder.h).
#include <typeinfo>

#include "leantrain/autocast.h"
#include "leantrain/error.h"
#include "leantrain/nn_encoder.h"
#include "leantrain/nn_llama.h"

namespace lt::nn {

namespace {

// LN(a + x): one fused pass when the norm is a plain LayerNorm.
Tensor add_norm(UnaryModule& ln, const Tensor& a, const Tensor& x) {
  if (LayerNorm* l = plain_layer_norm(&ln)) return l->forward_add(a, x).y;
  return ln(add(a, x));
}

}  // namespace

PostNormEncoderLayer::PostNormEncoderLayer(ParamFactory& pf, const EncoderLayerOptions& o) : type_(o.type) {
  LT_CHECK(o.heads > 0 && o.hidden % o.heads == 0, "encoder layer: hidden size " + std::to_string(o.hidden),
           "is not divisible by " + std::to_string(o.heads) + " heads", "choose a head count that divides it");
  const int64_t c = o.hidden, f = o.intermediate;
  const LinearOptions lin{.weight_init = o.init};
  // q, k and v weights one after another, then their biases: one GEMM over stacked_rows.
  Tensor qw = pf.make({c, c}, o.init), kw = pf.make({c, c}, o.init), vw = pf.make({c, c}, o.init);
  Tensor qb = pf.make({c}, Init::zeros()), kb = pf.make({c}, Init::zeros()), vb = pf.make({c}, Init::zeros());
  auto q = std::make_shared<Linear>(qw, qb), k = std::make_shared<Linear>(kw, kb), v = std::make_shared<Linear>(vw, vb);
  std::shared_ptr<AttentionCore> core;
  if (o.block_sparse) core = std::make_shared<BlockSparseAttentionCore>(c, o.heads, *o.block_sparse, pf.next_seed());
  else core = std::make_shared<AttentionCore>(c, o.heads, /*causal=*/false);
  const std::string p = o.prefix;
  if (o.naming == EncoderNaming::Bert) {
    auto attention = register_module("attention", std::make_shared<ModuleGroup>(p + "Attention"));
    auto self = attention->add_group("self", p + (o.block_sparse ? "BlockSparseAttention" : "SelfAttention"));
    q_ = self->add<UnaryModule>("query", q), k_ = self->add<UnaryModule>("key", k), v_ = self->add<UnaryModule>("value", v);
    core_ = self->add("core", core);
    auto so = attention->add_group("output", p + "SelfOutput");
    out_ = so->add<UnaryModule>("dense", std::make_shared<Linear>(pf, c, c, lin));
    ln1_ = so->add<UnaryModule>("LayerNorm", std::make_shared<LayerNorm>(pf, c, o.eps));
    drop1_ = so->add<UnaryModule>("dropout", std::make_shared<Dropout>(o.dropout, pf.next_seed()));
    auto inter = register_module("intermediate", std::make_shared<ModuleGroup>(p + "Intermediate"));
    fc1_ = inter->add<UnaryModule>("dense", std::make_shared<Linear>(pf, c, f, lin));
    act_ = inter->add<UnaryModule>("intermediate_act_fn", std::make_shared<Gelu>(o.approx));
    auto out = register_module("output", std::make_shared<ModuleGroup>(p + "Output"));
    fc2_ = out->add<UnaryModule>("dense", std::make_shared<Linear>(pf, f, c, lin));
    ln2_ = out->add<UnaryModule>("LayerNorm", std::make_shared<LayerNorm>(pf, c, o.eps));
    drop2_ = out->add<UnaryModule>("dropout", std::make_shared<Dropout>(o.dropout, pf.next_seed()));
  } else {
    // DistilBERT: no dropout after out_lin (only on the attention probabilities, which the
    // kernels do not apply); the FFN's dropout after lin2.
    auto attention = register_module("attention", std::make_shared<ModuleGroup>("MultiHeadSelfAttention"));
    q_ = attention->add<UnaryModule>("q_lin", q), k_ = attention->add<UnaryModule>("k_lin", k);
    v_ = attention->add<UnaryModule>("v_lin", v);
    core_ = attention->add("core", core);
    out_ = attention->add<UnaryModule>("out_lin", std::make_shared<Linear>(pf, c, c, lin));
    drop1_ = attention->add<UnaryModule>("dropout", std::make_shared<Dropout>(0.0, pf.next_seed()));
    ln1_ = register_child<UnaryModule>("sa_layer_norm", std::make_shared<LayerNorm>(pf, c, o.eps));
    auto ffn = register_module("ffn", std::make_shared<ModuleGroup>("FFN"));
    fc1_ = ffn->add<UnaryModule>("lin1", std::make_shared<Linear>(pf, c, f, lin));
    fc2_ = ffn->add<UnaryModule>("lin2", std::make_shared<Linear>(pf, f, c, lin));
    act_ = ffn->add<UnaryModule>("activation", std::make_shared<Gelu>(o.approx));
    drop2_ = ffn->add<UnaryModule>("dropout", std::make_shared<Dropout>(o.dropout, pf.next_seed()));
    ln2_ = register_child<UnaryModule>("output_layer_norm", std::make_shared<LayerNorm>(pf, c, o.eps));
  }
}

// fc1 -> GELU -> fc2 keeping fc1's output only (linear_gelu_parts, gelu_linear), as nn::Mlp does;
// through the modules when one is wrapped (beyond a recompute) or replaced.
Tensor PostNormEncoderLayer::mlp(const Tensor& h) {
  Linear *fc1 = plain_linear(fc1_.get()), *fc2 = plain_linear(fc2_.get());
  auto* act = dynamic_cast<Gelu*>(act_.get());
  if (fc1 && fc2 && act && typeid(*act) == typeid(Gelu) && act->recomputed_or_unwrapped()) {
    LinearGelu g = fc1->forward_gelu_parts(h, act->approx());
    return fc2->forward_after_gelu(g.pre, g.act, act->approx());
  }
  return (*fc2_)((*act_)((*fc1_)(h)));
}

Tensor PostNormEncoderLayer::forward(const Tensor& x, const Tensor& mask) {
  LT_CHECK(x.dim() == 3, "encoder layer: input shape " + shape_str(x.shape()), "expected [B, T, hidden]",
           "pass a batch of sequences");
  Tensor qkv = fused_linear(x, {&q_, &k_, &v_});
  if (!qkv.defined()) qkv = concat({(*q_)(x), (*k_)(x), (*v_)(x)}, -1);
  Tensor h = add_norm(*ln1_, (*drop1_)((*out_)((*core_)(qkv, mask))), x);
  return add_norm(*ln2_, (*drop2_)(mlp(h)), h);
}

}  // namespace lt::nn
