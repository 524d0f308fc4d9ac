// The LLaMA-family decoder (models/llama.h): transformers' *Model body under "model", blocks of
// pre-RMSNorm attention and gated MLP, the final norm, and an LM head tied to embed_tokens unless
// tie_word_embeddings is false. Init as transformers' _init_weights: normal(initializer_range) for
// Linear and Embedding weights, zero biases, ones for the norms.
#include <numeric>

#include "leantrain/autocast.h"
#include "leantrain/autograd.h"
#include "leantrain/error.h"
#include "models/llama.h"

namespace lt::models {

namespace {

// transformers' *Model: the "model." subtree.
class LlamaBody : public nn::Module {
 public:
  LlamaBody(const LlamaConfig& c, nn::ParamFactory& pf, const std::string& prefix) : type_(prefix + "Model") {
    const nn::Init init = nn::Init::normal(c.initializer_range);
    const int64_t C = c.hidden_size;
    block_type_ = prefix + "DecoderLayer";
    attn_type_ = prefix + "Attention";
    mlp_type_ = prefix + "MLP";
    rope_type_ = prefix + "RotaryEmbedding";
    embed_tokens = register_module("embed_tokens", std::make_shared<nn::Embedding>(pf, c.vocab_size, C, init));
    layers = register_module("layers", std::make_shared<nn::ModuleList>());
    // Shared by every attention layer, as transformers' model.rotary_emb computes cos and sin once.
    rotary_emb = register_module("rotary_emb", std::make_shared<nn::RotaryEmbedding>(
                                                   rope_frequencies(c.head_size(), c.rope_theta, c.rope_scaling),
                                                   rope_type_.c_str()));
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
      auto ln_1 = std::make_shared<nn::RMSNorm>(pf, C, c.rms_norm_eps);
      nn::DecoderAttentionOptions ao{.hidden = C,
                                     .heads = c.num_attention_heads,
                                     .kv_heads = c.kv_heads(),
                                     .head_dim = c.head_size(),
                                     .qkv_bias = c.qkv_bias(),
                                     .o_bias = c.o_bias(),
                                     .qk_norm = c.qk_norm(),
                                     .qk_norm_eps = c.rms_norm_eps,
                                     .window = c.window_of(i),
                                     .init = init,
                                     .type = attn_type_.c_str()};
      auto attn = std::make_shared<nn::DecoderSelfAttention>(pf, ao, rotary_emb);
      auto ln_2 = std::make_shared<nn::RMSNorm>(pf, C, c.rms_norm_eps);
      nn::GatedMlpOptions mo{.hidden = C, .intermediate = c.intermediate_size, .bias = c.gated_bias(), .init = init,
                             .type = mlp_type_.c_str()};
      auto mlp = std::make_shared<nn::GatedMlp>(pf, mo);
      layers->append(std::make_shared<nn::PreNormBlock>(
          block_type_.c_str(), ln_1, attn, ln_2, mlp,
          nn::BlockNames{"input_layernorm", "self_attn", "post_attention_layernorm", "mlp"}));
    }
    norm = register_module("norm", std::make_shared<nn::RMSNorm>(pf, C, c.rms_norm_eps));
  }
  const char* type_name() const override { return type_.c_str(); }

  std::shared_ptr<nn::Embedding> embed_tokens;
  std::shared_ptr<nn::ModuleList> layers;
  std::shared_ptr<nn::RMSNorm> norm;
  std::shared_ptr<nn::RotaryEmbedding> rotary_emb;

 private:
  // Type names the modules point at (const char*): they live as long as the body.
  std::string type_, block_type_, attn_type_, mlp_type_, rope_type_;
};

// Sets the rotary position offset for one forward and puts 0 back after it.
class PositionOffsetScope {
 public:
  PositionOffsetScope(nn::RotaryEmbedding& r, int64_t p) : r_(r) { r_.set_pos_offset(p); }
  ~PositionOffsetScope() { r_.set_pos_offset(0); }
  PositionOffsetScope(const PositionOffsetScope&) = delete;
  PositionOffsetScope& operator=(const PositionOffsetScope&) = delete;

 private:
  nn::RotaryEmbedding& r_;
};

}  // namespace

Llama::Llama(const LlamaConfig& cfg, const nn::InitOptions& init) : cfg_(cfg) {
  cfg_.validate();
  type_ = cfg_.class_prefix() + "ForCausalLM";
  nn::ParamFactory pf(init);
  auto body = register_module("model", std::make_shared<LlamaBody>(cfg_, pf, cfg_.class_prefix()));
  embed_tokens_ = body->embed_tokens;
  layers_ = body->layers;
  norm_ = body->norm;
  rotary_ = body->rotary_emb;
  if (!cfg_.tie_word_embeddings)
    lm_head_ = register_module(
        "lm_head", std::make_shared<nn::Linear>(pf, cfg_.hidden_size, cfg_.vocab_size,
                                                nn::LinearOptions{.bias = false,
                                                                  .weight_init = nn::Init::normal(cfg_.initializer_range)}));
  pf.materialize();  // the parameter store: one flat buffer, filled in registration order
}

Tensor Llama::hidden_states(const Tensor& ids, const nn::TokenMask& mask_in, int64_t pos_offset) {
  const std::string name = cfg_.class_prefix();
  LT_CHECK(ids.dim() == 2 && (ids.dtype() == DType::I64 || ids.dtype() == DType::I32),
           name + " input: token ids have shape " + shape_str(ids.shape()) + " and dtype " + dtype_name(ids.dtype()),
           "expected i64 or i32 [batch, time]", "pass token ids as a 2-D integer tensor");
  const int64_t B = ids.size(0), T = ids.size(1);
  LT_CHECK(pos_offset >= 0 && pos_offset + T <= cfg_.max_position_embeddings,
           name + " input: sequence of " + std::to_string(pos_offset + T) + " tokens",
           "the model has max_position_embeddings = " + std::to_string(cfg_.max_position_embeddings),
           "use a shorter sequence");
  // A checkpointed block recomputes its forward during backward, after the offset is reset.
  LT_CHECK(pos_offset == 0 || !grad_enabled(), name + " input: position offset " + std::to_string(pos_offset),
           "an offset is for cached decoding, which records no gradients", "run it under no-grad or inference mode");
  const nn::TokenMask mask = decoder_mask(name, mask_in, B, T, pos_offset);
  PositionOffsetScope positions(*rotary_, pos_offset);
  Tensor x = (*embed_tokens_)(ids);
  for (size_t i = 0; i < layers_->size(); ++i) x = layers_->at<nn::PreNormBlock>(i)(x, mask);
  return (*norm_)(x);
}

Tensor Llama::head(const Tensor& hidden) {
  if (lm_head_) return (*lm_head_)(hidden);
  // Tied head: [B,T,C] @ [V,C]^T; under autocast the table is cast for this GEMM only.
  return linear(autocast(hidden), autocast_tied(embed_tokens_->weight()), Tensor());
}

Tensor Llama::forward(const Tensor& ids, const nn::TokenMask& mask) { return head(hidden_states(ids, mask)); }

// head()'s operands when it is one bias-free [V, C] GEMM (tied, or a plain untied lm_head).
Model::HeadInputs Llama::loss_head_inputs(const Tensor& ids, const nn::TokenMask& mask) {
  if (!lm_head_) return {autocast(hidden_states(ids, mask)), autocast_tied(embed_tokens_->weight())};
  nn::Linear* l = nn::plain_linear(lm_head_.get());
  if (!l || l->bias().defined() || l->weight_in_out()) return {};
  return {autocast(hidden_states(ids, mask)), autocast(l->weight())};
}

Tensor Llama::next_token_logits(const Tensor& ids) {
  Tensor h = hidden_states(ids);
  return head(reshape(select(h, 1, ids.size(1) - 1), {1, cfg_.hidden_size}));
}

// Untied, the embedding table is read by its lookup alone, and the head by its own call unless a
// chunked loss reads its weight directly; tied, both GEMMs read the table.
std::vector<nn::Module*> Llama::standalone_modules() { return untied_table_and_head(embed_tokens_.get(), lm_head_.get()); }
Tensor Llama::tied_table() const { return lm_head_ ? Tensor() : embed_tokens_->weight(); }

double Llama::root_forward_flops(const Shape& input) const {
  if (lm_head_) return 0;  // the untied head is a module: counted at its own call
  double rows = 1;
  for (int64_t d : input) rows *= double(d);
  return 2 * rows * double(cfg_.vocab_size) * double(cfg_.hidden_size);
}

std::string Llama::checkpoint_key_to_name(const std::string& key) const {
  if (key.ends_with("rotary_emb.inv_freq")) return "";  // a buffer older checkpoints saved
  if (key == "lm_head.weight") return lm_head_ ? key : "";  // else tied to model.embed_tokens.weight
  if (key.rfind("model.", 0) == 0) return key;
  return "model." + key;  // saved from a bare *Model
}

}  // namespace lt::models
