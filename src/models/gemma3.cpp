// The Gemma 3 text decoder (models/gemma3.h): transformers' Gemma3TextModel under "model", blocks of
// sandwich-normed attention and GeGLU MLP, the final norm, a head tied to embed_tokens unless
// tie_word_embeddings is false. Init as transformers' _init_weights: normal(initializer_range) for
// Linear and Embedding weights, zeros for the (1 + w) norms.
#include <cmath>

#include "leantrain/autocast.h"
#include "leantrain/autograd.h"
#include "leantrain/error.h"
#include "models/gemma3.h"

namespace lt::models {

namespace {

class Gemma3Body : public nn::Module {
 public:
  Gemma3Body(const Gemma3Config& c, nn::ParamFactory& pf) {
    const nn::Init init = nn::Init::normal(c.initializer_range);
    const int64_t C = c.hidden_size;
    auto norm = [&](int64_t dim) { return std::make_shared<nn::RMSNorm>(pf, dim, c.rms_norm_eps, true); };
    // transformers zeroes the padding row at init, and its lookups add no gradient there.
    const int64_t pad = c.padding_idx();
    embed_tokens = register_module("embed_tokens",
                                   std::make_shared<nn::Embedding>(pf, c.vocab_size, C, init.with_zero_row(pad), pad));
    layers = register_module("layers", std::make_shared<nn::ModuleList>());
    // Full layers turn by rope_theta (scaled), sliding ones by rope_local_base_freq (transformers'
    // rotary_emb and rotary_emb_local; one module per layer type in transformers 5).
    rotary_emb = register_module("rotary_emb", std::make_shared<nn::RotaryEmbedding>(
                                                   rope_frequencies(c.head_dim, c.rope_theta, c.rope_scaling),
                                                   "Gemma3RotaryEmbedding"));
    rotary_emb_local = register_module(
        "rotary_emb_local", std::make_shared<nn::RotaryEmbedding>(
                                rope_frequencies(c.head_dim, c.rope_local_base_freq, RopeScaling{}), "Gemma3RotaryEmbedding"));
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
      const bool sliding = c.is_sliding(i);
      nn::DecoderAttentionOptions ao{.hidden = C,
                                     .heads = c.num_attention_heads,
                                     .kv_heads = c.num_key_value_heads,
                                     .head_dim = c.head_dim,
                                     .qk_norm = true,
                                     .qk_norm_eps = c.rms_norm_eps,
                                     .unit_offset_norms = true,
                                     .scale = 1.0 / std::sqrt(c.query_pre_attn_scalar),
                                     .window = sliding ? c.sliding_window : 0,
                                     .init = init,
                                     .type = "Gemma3Attention"};
      auto attn = std::make_shared<nn::DecoderSelfAttention>(pf, ao, sliding ? rotary_emb_local : rotary_emb);
      nn::GatedMlpOptions mo{.hidden = C, .intermediate = c.intermediate_size, .act = GateAct::GeluTanh,
                             .init = init, .type = "Gemma3MLP"};
      auto ln_1 = norm(C), ln_2 = norm(C);
      auto mlp = std::make_shared<nn::GatedMlp>(pf, mo);
      // transformers' names: the norm after the attention is post_attention_layernorm, the one
      // before the MLP pre_feedforward_layernorm.
      auto block = std::make_shared<nn::PreNormBlock>(
          "Gemma3DecoderLayer", ln_1, attn, ln_2, mlp,
          nn::BlockNames{"input_layernorm", "self_attn", "pre_feedforward_layernorm", "mlp"});
      block->set_post_norms(norm(C), norm(C), "post_attention_layernorm", "post_feedforward_layernorm");
      layers->append(block);
    }
    norm_ = register_module("norm", norm(C));
  }
  const char* type_name() const override { return "Gemma3TextModel"; }

  std::shared_ptr<nn::Embedding> embed_tokens;
  std::shared_ptr<nn::ModuleList> layers;
  std::shared_ptr<nn::RMSNorm> norm_;
  std::shared_ptr<nn::RotaryEmbedding> rotary_emb, rotary_emb_local;
};


// sqrt(hidden) rounded to the embedding's dtype, as Gemma3TextScaledWordEmbedding's
// embed_scale.to(weight.dtype).
double embed_scale(int64_t hidden, DType dt) {
  const float s = float(std::sqrt(double(hidden)));
  if (dt == DType::BF16) return bf16_to_float(float_to_bf16(s));
  if (dt == DType::F16) return half_to_float(float_to_half(s));
  return dt == DType::F64 ? std::sqrt(double(hidden)) : double(s);
}

}  // namespace

Gemma3::Gemma3(const Gemma3Config& cfg, const nn::InitOptions& init)
    : DecoderLM(cfg.hidden_size, cfg.vocab_size, cfg.max_position_embeddings), cfg_(cfg) {
  cfg_.validate();
  nn::ParamFactory pf(init);
  auto body = register_module("model", std::make_shared<Gemma3Body>(cfg_, pf));
  set_body(body->embed_tokens, body->layers, body->norm_);
  rotary_ = body->rotary_emb;
  rotary_local_ = body->rotary_emb_local;
  add_untied_head(pf, cfg_.tie_word_embeddings, cfg_.initializer_range);
  pf.materialize();
}

Tensor Gemma3::hidden_states(const Tensor& ids, const nn::TokenMask& mask_in, int64_t pos_offset) {
  check_decoder_ids("Gemma3", ids, pos_offset, cfg_.max_position_embeddings);
  const int64_t B = ids.size(0), T = ids.size(1);
  LT_CHECK(pos_offset == 0 || !grad_enabled(), "Gemma3 input: position offset " + std::to_string(pos_offset),
           "an offset is for cached decoding, which records no gradients", "run it under no-grad or inference mode");
  const nn::TokenMask mask = decoder_mask("Gemma3", mask_in, B, T, pos_offset);
  PositionOffsetScope positions({rotary_.get(), rotary_local_.get()}, pos_offset);
  Tensor x = (*embed_tokens_)(ids);
  x = scale(x, embed_scale(cfg_.hidden_size, x.dtype()));
  return run_layers(x, mask);
}

Tensor Gemma3::head(const Tensor& hidden) {
  Tensor logits = DecoderLM::head(hidden);
  const double cap = cfg_.final_logit_softcapping;
  if (cap > 0) logits = scale(tanh(scale(logits, 1.0 / cap)), cap);  // logits / cap, tanh, * cap
  return logits;
}

// The fused GEMM + cross-entropy reads the head's weight directly; a soft cap sits between them,
// so a capped model takes the unfused path (forward, then cross_entropy on the capped logits).
Model::HeadInputs Gemma3::loss_head_inputs(const Tensor& ids, const nn::TokenMask& mask) {
  if (cfg_.final_logit_softcapping > 0) return {};
  return DecoderLM::loss_head_inputs(ids, mask);
}

std::string Gemma3::checkpoint_key_to_name(const std::string& key) const {
  return text_tower_key(key, {"vision_tower.", "multi_modal_projector.", "model.vision_tower.", "model.multi_modal_projector."});
}

}  // namespace lt::models
