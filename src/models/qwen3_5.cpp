// The Qwen3.5 text decoder (models/qwen3_5.h): transformers' Qwen3_5TextModel under "model", pre-norm
// blocks whose mixer is a Gated DeltaNet (linear_attn) or a gated attention (self_attn), SwiGLU MLPs,
// the final (1 + w) norm, a head tied to embed_tokens unless tie_word_embeddings is false. Init as
// transformers' _init_weights: normal(initializer_range) for Linear and Embedding weights, zeros
// for the (1 + w) norms (the DeltaNet's own in GatedDeltaNet).
#include "leantrain/autocast.h"
#include "leantrain/autograd.h"
#include "leantrain/error.h"
#include "leantrain/nn_deltanet.h"
#include "models/qwen3_5.h"

namespace lt::models {

namespace {

class Qwen35Body : public nn::Module {
 public:
  Qwen35Body(const Qwen35Config& c, nn::ParamFactory& pf) {
    const nn::Init init = nn::Init::normal(c.initializer_range);
    const int64_t C = c.hidden_size;
    auto norm = [&](int64_t dim) { return std::make_shared<nn::RMSNorm>(pf, dim, c.rms_norm_eps, true); };
    // transformers zeroes the padding row at init, and its lookups add no gradient there.
    const int64_t pad = c.padding_idx();
    embed_tokens = register_module("embed_tokens",
                                   std::make_shared<nn::Embedding>(pf, c.vocab_size, C, init.with_zero_row(pad), pad));
    layers = register_module("layers", std::make_shared<nn::ModuleList>());
    // One set of frequencies for the rotated first rotary_dim() dims of every full-attention head.
    rotary_emb = register_module("rotary_emb", std::make_shared<nn::RotaryEmbedding>(
                                                   rope_frequencies(c.rotary_dim(), c.rope_theta, RopeScaling{}),
                                                   "Qwen3_5TextRotaryEmbedding"));
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
      std::shared_ptr<nn::SelfAttention> mixer;
      std::string mixer_name;
      if (c.is_full(i)) {
        nn::DecoderAttentionOptions ao{.hidden = C,
                                       .heads = c.num_attention_heads,
                                       .kv_heads = c.num_key_value_heads,
                                       .head_dim = c.head_dim,
                                       .qk_norm = true,
                                       .qk_norm_eps = c.rms_norm_eps,
                                       .unit_offset_norms = true,
                                       .output_gate = true,
                                       .init = init,
                                       .type = "Qwen3_5Attention"};
        mixer = std::make_shared<nn::DecoderSelfAttention>(pf, ao, rotary_emb);
        mixer_name = "self_attn";
      } else {
        nn::GatedDeltaNetOptions go{.hidden = C,
                                    .key_heads = c.linear_num_key_heads,
                                    .key_dim = c.linear_key_head_dim,
                                    .value_heads = c.linear_num_value_heads,
                                    .value_dim = c.linear_value_head_dim,
                                    .conv_kernel = c.linear_conv_kernel_dim,
                                    .norm_eps = c.rms_norm_eps,
                                    .init = init};
        mixer = std::make_shared<nn::GatedDeltaNet>(pf, go);
        mixer_name = "linear_attn";
      }
      nn::GatedMlpOptions mo{.hidden = C, .intermediate = c.intermediate_size, .init = init, .type = "Qwen3_5MLP"};
      auto ln_1 = norm(C), ln_2 = norm(C);
      auto mlp = std::make_shared<nn::GatedMlp>(pf, mo);
      layers->append(std::make_shared<nn::PreNormBlock>(
          "Qwen3_5DecoderLayer", ln_1, mixer, ln_2, mlp,
          nn::BlockNames{"input_layernorm", mixer_name, "post_attention_layernorm", "mlp"}));
    }
    norm_ = register_module("norm", norm(C));
  }
  const char* type_name() const override { return "Qwen3_5TextModel"; }

  std::shared_ptr<nn::Embedding> embed_tokens;
  std::shared_ptr<nn::ModuleList> layers;
  std::shared_ptr<nn::RMSNorm> norm_;
  std::shared_ptr<nn::RotaryEmbedding> rotary_emb;
};


}  // namespace

Qwen35::Qwen35(const Qwen35Config& cfg, const nn::InitOptions& init)
    : DecoderLM(cfg.hidden_size, cfg.vocab_size, cfg.max_position_embeddings), cfg_(cfg) {
  cfg_.validate();
  nn::ParamFactory pf(init);
  auto body = register_module("model", std::make_shared<Qwen35Body>(cfg_, pf));
  set_body(body->embed_tokens, body->layers, body->norm_);
  rotary_ = body->rotary_emb;
  add_untied_head(pf, cfg_.tie_word_embeddings, cfg_.initializer_range);
  pf.materialize();
}

Tensor Qwen35::hidden_states(const Tensor& ids, const nn::TokenMask& mask_in, int64_t pos_offset) {
  check_decoder_ids("Qwen3.5", ids, pos_offset, cfg_.max_position_embeddings);
  const int64_t B = ids.size(0), T = ids.size(1);
  // The DeltaNet layers carry a state from token to token that a cached step would need: leantrain
  // decodes by running the whole prefix again (no offset), which these layers compute exactly.
  LT_CHECK(pos_offset == 0, "Qwen3.5 input: position offset " + std::to_string(pos_offset),
           "its Gated DeltaNet layers have no cache of their recurrent state", "run the whole sequence");
  const nn::TokenMask mask = decoder_mask("Qwen3.5", mask_in, B, T, pos_offset);
  // Packed documents (doc_pos) need nothing more: every layer keeps them apart (the attention's
  // block-diagonal mask and per-document rotary positions, the DeltaNet's restarts). Key padding is
  // honoured by the DeltaNet only as one run of real tokens per row or document: checked here once
  // for a GPU mask (the layers check a CPU one themselves).
  if (mask.key_padding.defined() && !mask.key_padding.device().is_cpu()) {
    bool deltanet = false;
    for (int64_t i = 0; i < cfg_.num_hidden_layers; ++i) deltanet = deltanet || !cfg_.is_full(i);
    if (deltanet) nn::GatedDeltaNet::check_padding(mask);
  }
  PositionOffsetScope positions({rotary_.get()}, pos_offset);
  return run_layers((*embed_tokens_)(ids), mask);
}

std::string Qwen35::checkpoint_key_to_name(const std::string& key) const {
  return text_tower_key(key, {"model.visual.", "visual.", "mtp.", "model.mtp."});
}

}  // namespace lt::models
