// Qwen3.5's text decoder as transformers computes it (Qwen3_5ForCausalLM; the text tower of a
// qwen3_5 Qwen3_5ForConditionalGeneration checkpoint): a hybrid of Gated DeltaNet layers
// ("linear_attention", nn_deltanet.h) and gated grouped-query attention ("full_attention":
// q_proj doubled for the output gate, per-head (1 + w) q/k norms, partial rotary of
// partial_rotary_factor of head_dim 256), every full_attention_interval-th layer unless
// layer_types says otherwise; (1 + w) RMSNorms in f32 (Qwen3_5RMSNorm) before each mixer and MLP
// and at the end, SwiGLU MLPs, an embedding without scaling, a head tied or not.
// Multi-token prediction layers (mtp_num_hidden_layers, keys mtp.*) are read from config.json and
// written back, but not built: their weights are skipped when loading (as transformers'
// Qwen3_5ForCausalLM ignores them) and absent from saved checkpoints (docs/decisions.md).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/llama.h"

namespace lt::models {

struct Qwen35Config {
  // Qwen3_5TextConfig's defaults (the 9B's shape).
  int64_t vocab_size = 248320, hidden_size = 4096, intermediate_size = 12288, num_hidden_layers = 32,
          num_attention_heads = 16, num_key_value_heads = 4, head_dim = 256, max_position_embeddings = 32768;
  int64_t linear_conv_kernel_dim = 4, linear_key_head_dim = 128, linear_value_head_dim = 128,
          linear_num_key_heads = 16, linear_num_value_heads = 32;
  double rms_norm_eps = 1e-6, initializer_range = 0.02;
  double rope_theta = 10000.0;            // rope_parameters' (transformers' fallback when absent)
  double partial_rotary_factor = 0.25;    // of head_dim, rotated (64 of 256)
  std::vector<bool> full;                 // per layer (layer_types); empty: full_attention_interval
  int64_t full_attention_interval = 4;    // layer i is full attention when (i + 1) % interval == 0
  int64_t mtp_num_hidden_layers = 0;      // read and written back; not built
  bool tie_word_embeddings = false;
  // Read and written back untouched: bos/eos/pad_token_id, torch_dtype/dtype, rope_parameters'
  // mrope_section and mrope_interleaved (one text position: multimodal RoPE is plain RoPE),
  // mtp_use_dedicated_embeddings, mamba_ssm_dtype.
  nlohmann::json kept = nlohmann::json::object();
  nlohmann::json rope_kept = nlohmann::json::object();

  static std::vector<std::string> preset_names();
  static Qwen35Config preset(const std::string& name);
  // model_type qwen3_5_text, or qwen3_5 (its text_config).
  static Qwen35Config from_json(const nlohmann::json& j);
  std::string to_json() const;  // qwen3_5_text: loads in transformers as Qwen3_5ForCausalLM
  void validate() const;
  bool is_full(int64_t layer) const;
  // embed_tokens' padding_idx (transformers builds it with pad_token_id, default none): -1 for none.
  int64_t padding_idx() const;
  int64_t rotary_dim() const;  // int(head_dim * partial_rotary_factor)
  double num_parameters() const;  // closed form
};

// model.{embed_tokens, layers.N.{input_layernorm, linear_attn.{in_proj_qkv, in_proj_z, in_proj_b,
// in_proj_a, conv1d, dt_bias, A_log, norm, out_proj} | self_attn.{q,k,v,o}_proj, self_attn.{q,k}_norm,
// post_attention_layernorm, mlp.{gate,up,down}_proj}, norm}, lm_head (absent when tied).
class Qwen35 : public DecoderLM {
 public:
  Qwen35(const Qwen35Config& cfg, const nn::InitOptions& init);
  const char* type_name() const override { return "Qwen3_5ForCausalLM"; }
  Tensor hidden_states(const Tensor& ids, const nn::TokenMask& mask = {}, int64_t pos_offset = 0) override;
  std::string model_type() const override { return "qwen3_5_text"; }
  std::string config_json() const override { return cfg_.to_json(); }
  // Qwen3_5ForCausalLM keys, a bare Qwen3_5TextModel's, and a qwen3_5 checkpoint's text tower
  // (model.language_model.*); its vision tower (model.visual.*), the mtp.* layers, a tied lm_head
  // and rotary buffers are skipped.
  std::string checkpoint_key_to_name(const std::string& key) const override;
  const Qwen35Config& config() const { return cfg_; }

 private:
  Qwen35Config cfg_;
  std::shared_ptr<nn::RotaryEmbedding> rotary_;
};

}  // namespace lt::models
