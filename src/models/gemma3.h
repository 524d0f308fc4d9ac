// Gemma 3's text decoder as transformers computes it (Gemma3ForCausalLM; the text tower of a
// gemma3 Gemma3ForConditionalGeneration checkpoint): RMSNorms that scale by (1 + w) in f32, the
// embedding scaled by sqrt(hidden) rounded to its dtype, q/k norms, attention scaled by
// query_pre_attn_scalar^-0.5, four norms a layer (the attention's and the MLP's outputs are
// normalised before each residual add), GeGLU (gelu_pytorch_tanh), sliding and full layers with
// their own RoPE bases, optional final-logit soft-capping, a head tied to the embedding.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/llama.h"

namespace lt::models {

struct Gemma3Config {
  // Gemma3TextConfig's defaults.
  int64_t vocab_size = 262208, hidden_size = 2304, intermediate_size = 9216, num_hidden_layers = 26,
          num_attention_heads = 8, num_key_value_heads = 4, head_dim = 256, max_position_embeddings = 131072;
  double rms_norm_eps = 1e-6, initializer_range = 0.02;
  double query_pre_attn_scalar = 256;
  double rope_theta = 1e6;             // full-attention layers
  RopeScaling rope_scaling;            // full-attention layers only (linear 8 for 4b)
  double rope_local_base_freq = 1e4;   // sliding layers (default RoPE)
  int64_t sliding_window = 4096;       // keys a sliding layer's query sees, itself included
  std::vector<bool> sliding;           // per layer (layer_types); empty: the 5:1 pattern of sliding_window_pattern
  int64_t sliding_window_pattern = 6;  // layer i slides unless (i + 1) % pattern == 0
  double final_logit_softcapping = 0;  // 0: none; else logits = cap * tanh(logits / cap)
  bool tie_word_embeddings = true;
  // Read and written back untouched: bos_token_id, eos_token_id, pad_token_id, torch_dtype.
  nlohmann::json kept = nlohmann::json::object();

  static std::vector<std::string> preset_names();
  static Gemma3Config preset(const std::string& name);
  // model_type gemma3_text, or gemma3 (its text_config, which a multimodal checkpoint nests).
  static Gemma3Config from_json(const nlohmann::json& j);
  std::string to_json() const;  // gemma3_text: loads in transformers as Gemma3ForCausalLM
  void validate() const;
  bool is_sliding(int64_t layer) const;
  // embed_tokens' padding_idx (transformers builds it with pad_token_id, default 0): -1 for none.
  int64_t padding_idx() const;
  double num_parameters() const;  // closed form
};

// model.{embed_tokens, layers.N.{input_layernorm, self_attn.{q,k,v,o}_proj, self_attn.{q,k}_norm,
// post_attention_layernorm, pre_feedforward_layernorm, mlp.{gate,up,down}_proj,
// post_feedforward_layernorm}, norm}, lm_head (absent when tied).
class Gemma3 : public DecoderLM {
 public:
  Gemma3(const Gemma3Config& cfg, const nn::InitOptions& init);
  const char* type_name() const override { return "Gemma3ForCausalLM"; }
  Tensor hidden_states(const Tensor& ids, const nn::TokenMask& mask = {}, int64_t pos_offset = 0) override;
  std::string model_type() const override { return "gemma3_text"; }
  std::string config_json() const override { return cfg_.to_json(); }
  // Gemma3ForCausalLM keys, and a gemma3 checkpoint's text tower (language_model.model.* of
  // transformers 4.50-4.51, model.language_model.* of later ones); its vision tower and projector
  // are skipped, as are a tied lm_head and rotary buffers.
  std::string checkpoint_key_to_name(const std::string& key) const override;
  const Gemma3Config& config() const { return cfg_; }

 private:
  Tensor head(const Tensor& hidden) override;  // soft-capped when configured
  HeadInputs loss_head_inputs(const Tensor& input, const nn::TokenMask& mask) override;
  Gemma3Config cfg_;
  std::shared_ptr<nn::RotaryEmbedding> rotary_, rotary_local_;
};

}  // namespace lt::models
