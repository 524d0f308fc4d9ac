// GPT-2 as transformers' GPT2LMHeadModel: pre-LN blocks, learned positions, GELU (tanh) MLP,
// Conv1D weights stored [in, out], and an LM head tied to wte (logits = h @ wte^T), so the
// parameter list is exactly the reference one and a Hugging Face checkpoint loads by name.
#include <cmath>
#include <numeric>
#include <tuple>

#include "leantrain/autocast.h"
#include "leantrain/autograd.h"
#include "leantrain/error.h"
#include "leantrain/models.h"

namespace lt::models {

namespace {

// transformers' GPT2Model: the "transformer." subtree.
class Gpt2Body : public nn::Module {
 public:
  const char* type_name() const override { return "GPT2Model"; }
  Gpt2Body(const GPT2Config& c, nn::ParamFactory& pf) {
    // Reference init: normal(0.02) everywhere, residual projections scaled by 1/sqrt(2 n_layer).
    const nn::Init proj_init = nn::Init::normal(0.02 / std::sqrt(2.0 * double(c.n_layer)));
    wte = register_module("wte", std::make_shared<nn::Embedding>(pf, c.vocab_size, c.n_embd));
    wpe = register_module("wpe", std::make_shared<nn::Embedding>(pf, c.n_positions, c.n_embd));
    drop = register_module("drop", std::make_shared<nn::Dropout>(c.embd_pdrop, pf.next_seed()));
    h = register_module("h", std::make_shared<nn::ModuleList>());
    for (int64_t i = 0; i < c.n_layer; ++i) {
      auto ln_1 = std::make_shared<nn::LayerNorm>(pf, c.n_embd, c.layer_norm_epsilon);
      auto attn = std::make_shared<nn::CausalSelfAttention>(pf, c.n_embd, c.n_head, c.resid_pdrop, proj_init);
      auto ln_2 = std::make_shared<nn::LayerNorm>(pf, c.n_embd, c.layer_norm_epsilon);
      nn::MlpOptions mo{.dim = c.n_embd,
                        .hidden = c.mlp_width(),
                        .approx = c.gelu_approx(),
                        .layout = nn::WeightLayout::InOut,
                        .fc1_init = nn::Init::normal(0.02),
                        .fc2_init = proj_init,
                        .dropout = c.resid_pdrop};
      auto mlp = std::make_shared<nn::Mlp>(pf, mo);
      h->append(std::make_shared<nn::PreNormBlock>("GPT2Block", ln_1, attn, ln_2, mlp));
    }
    ln_f = register_module("ln_f", std::make_shared<nn::LayerNorm>(pf, c.n_embd, c.layer_norm_epsilon));
  }
  std::shared_ptr<nn::Embedding> wte, wpe;
  std::shared_ptr<nn::Dropout> drop;
  std::shared_ptr<nn::ModuleList> h;
  std::shared_ptr<nn::LayerNorm> ln_f;
};

// True when every block hands its residual on unsummed (PreNormBlock::forward_split) and ln_f
// can add the last two terms: no forward wrapper anywhere in the stack.
bool stack_splits(const nn::ModuleList& h, const nn::LayerNorm& ln_f) {
  if (ln_f.forward_wrapper() || h.size() == 0) return false;
  for (size_t i = 0; i < h.size(); ++i)
    if (!h.at<nn::PreNormBlock>(i).splits_residual()) return false;
  return true;
}

}  // namespace

GPT2::GPT2(const GPT2Config& cfg, const nn::InitOptions& init) : cfg_(cfg) {
  cfg_.validate();
  nn::ParamFactory pf(init);
  auto body = register_module("transformer", std::make_shared<Gpt2Body>(cfg_, pf));
  wte_ = body->wte;
  wpe_ = body->wpe;
  drop_ = body->drop;
  h_ = body->h;
  ln_f_ = body->ln_f;
  if (!cfg_.tie_word_embeddings)  // registered after the body, so a tied model's parameters are unchanged
    lm_head_ = register_module("lm_head", std::make_shared<nn::Linear>(
                                              pf, cfg_.n_embd, cfg_.vocab_size,
                                              nn::LinearOptions{.bias = false, .weight_init = nn::Init::normal(0.02)}));
  pf.materialize();  // the parameter store: one flat buffer, filled in registration order
}

Tensor GPT2::hidden_states(const Tensor& ids, const nn::TokenMask& mask_in, int64_t pos_offset) {
  LT_CHECK(ids.dim() == 2 && (ids.dtype() == DType::I64 || ids.dtype() == DType::I32),
           "GPT-2 input: token ids have shape " + shape_str(ids.shape()) + " and dtype " + dtype_name(ids.dtype()),
           "expected i64 or i32 [batch, time]", "pass token ids as a 2-D integer tensor");
  const int64_t B = ids.size(0), T = ids.size(1);
  LT_CHECK(pos_offset >= 0 && pos_offset + T <= cfg_.n_positions,
           "GPT-2 input: sequence of " + std::to_string(pos_offset + T) + " tokens",
           "the model has n_positions = " + std::to_string(cfg_.n_positions), "use a shorter sequence");
  const nn::TokenMask mask = decoder_mask("GPT-2", mask_in, B, T, pos_offset);
  Tensor pos_ids;
  if (mask.doc_pos.defined()) {
    pos_ids = mask.doc_pos;  // packed documents: each token's position inside its document, [B, T]
  } else {
    std::vector<int64_t> pos(static_cast<size_t>(T));
    std::iota(pos.begin(), pos.end(), pos_offset);
    pos_ids = from_ints(pos, {T}, DType::I64, ids.device());
  }
  Tensor x = (*drop_)(add((*wte_)(ids), (*wpe_)(pos_ids)));  // [B,T,C] + [T,C] (or [B,T,C] for documents)
  // Plain blocks with lean saves off hand the residual on as two terms (PreNormBlock::
  // forward_split); ln_f then adds the last two in its own kernel.
  if (stack_splits(*h_, *ln_f_)) {
    Tensor m;
    for (size_t i = 0; i < h_->size(); ++i) std::tie(x, m) = h_->at<nn::PreNormBlock>(i).forward_split(x, m, mask);
    return ln_f_->forward_add(x, m).y;
  }
  for (size_t i = 0; i < h_->size(); ++i) x = h_->at<nn::PreNormBlock>(i)(x, mask);
  return (*ln_f_)(x);
}

Tensor GPT2::head(const Tensor& hidden) {
  if (lm_head_) return (*lm_head_)(hidden);
  // Tied head: [B,T,C] @ [V,C]^T; under autocast the table is cast for this GEMM only.
  return linear(hidden, autocast_tied(wte_->weight()), Tensor());
}

namespace {

// The parameters a training forward casts in one kernel (AutocastPrecast) under autocast: all of
// them, when the stack splits its residual (no wrappers: no checkpointing, so every weight's cast
// is kept for the backward anyway); none otherwise, nor without gradients (an evaluation's casts
// are freed one by one as it goes).
std::vector<Tensor> precast_params(nn::Module& m, const nn::ModuleList& h, const nn::LayerNorm& ln_f) {
  std::vector<Tensor> out;
  if (!autocast_dtype() || !grad_enabled() || !stack_splits(h, ln_f)) return out;
  for (auto& [name, p] : m.named_parameters()) out.push_back(p);
  return out;
}

}  // namespace

Tensor GPT2::forward(const Tensor& ids, const nn::TokenMask& mask) {
  AutocastPrecast precast(precast_params(*this, *h_, *ln_f_));
  return head(hidden_states(ids, mask));
}

// head()'s operands when it is one bias-free [V, C] GEMM (tied, or a plain untied lm_head).
Model::HeadInputs GPT2::loss_head_inputs(const Tensor& ids, const nn::TokenMask& mask) {
  AutocastPrecast precast(precast_params(*this, *h_, *ln_f_));
  if (!lm_head_) return {hidden_states(ids, mask), autocast_tied(wte_->weight())};
  nn::Linear* l = nn::plain_linear(lm_head_.get());
  if (!l || l->bias().defined() || l->weight_in_out()) return {};
  return {autocast(hidden_states(ids, mask)), autocast(l->weight())};
}

// As Llama's (wpe, 3 MiB for 124M, stays with the replicated parameters).
std::vector<nn::Module*> GPT2::standalone_modules() { return untied_table_and_head(wte_.get(), lm_head_.get()); }
Tensor GPT2::tied_table() const { return lm_head_ ? Tensor() : wte_->weight(); }

double GPT2::root_forward_flops(const Shape& input) const {
  if (lm_head_) return 0;  // the untied head is a module: counted at its own call
  double rows = 1;
  for (int64_t d : input) rows *= double(d);
  return 2 * rows * double(cfg_.vocab_size) * double(cfg_.n_embd);
}

std::string GPT2::checkpoint_key_to_name(const std::string& key) const {
  if (key.ends_with(".attn.bias") || key.ends_with(".attn.masked_bias")) return "";  // causal-mask buffers
  if (key == "lm_head.weight") return lm_head_ ? key : "";  // else tied to transformer.wte.weight
  if (key.rfind("transformer.", 0) == 0) return key;
  return "transformer." + key;  // saved from GPT2Model
}

}  // namespace lt::models
