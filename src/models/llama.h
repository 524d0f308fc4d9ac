// LLaMA-family decoders as transformers computes them: LlamaForCausalLM (LLaMA 2/3/3.1/3.2,
// TinyLlama, SmolLM2), Qwen2ForCausalLM (q/k/v biases), Qwen3ForCausalLM (per-head RMSNorm on q
// and k before RoPE) and MistralForCausalLM, with their sliding windows. Pre-RMSNorm blocks, RoPE (rotate-half; default, linear or llama3 frequencies),
// grouped-query attention, SwiGLU MLP, tied or untied LM head; transformers' parameter names.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "leantrain/models.h"
#include "leantrain/nn_llama.h"
#include "models/decoder_lm.h"

namespace lt::models {

// config.json's rope_scaling (or rope_parameters): which frequencies RoPE turns by.
struct RopeScaling {
  std::string type;  // "" (none: rope_type "default" or rope_scaling null), "linear" or "llama3"
  double factor = 1.0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  int64_t original_max_position_embeddings = 8192;       // llama3
};

struct LlamaConfig {
  // "llama", "qwen2", "qwen3", "mistral", "qwen3_moe" or "mixtral": the family, its defaults (transformers' for that type)
  // and its biases (llama: attention_bias, mlp_bias; qwen2: q, k, v always; qwen3: attention_bias
  // on q, k, v and o; mistral: none).
  std::string model_type = "llama";
  int64_t vocab_size = 32000, hidden_size = 4096, intermediate_size = 11008, num_hidden_layers = 32,
          num_attention_heads = 32;
  int64_t num_key_value_heads = 0;  // 0 (absent or null): num_attention_heads
  int64_t head_dim = 0;             // 0 (absent or null): hidden_size / num_attention_heads
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6, rope_theta = 10000.0, initializer_range = 0.02;
  RopeScaling rope_scaling;
  bool attention_bias = false, mlp_bias = false;  // llama (both), qwen3 (attention_bias)
  // Sliding-window attention (each query sees the sliding_window latest keys, itself included):
  // mistral's sliding_window on every layer (null: none; absent: transformers' 4096); qwen2 and
  // qwen3 only when use_sliding_window, on the layers layer_types names "sliding_attention" or
  // else those from max_window_layers on, as transformers' Qwen2Config / Qwen3Config lay them out.
  int64_t sliding_window = 0;  // 0: none
  bool use_sliding_window = false;
  int64_t max_window_layers = 28;
  std::vector<bool> layer_sliding;  // qwen2 / qwen3 layer_types; empty: from max_window_layers
  bool tie_word_embeddings = false;
  std::string hidden_act = "silu";
  // Mixture of experts (qwen3_moe, mixtral): the sparse layers' MLP is a router over
  // num_experts SwiGLU experts (num_local_experts in Mixtral's and transformers 5's files) of
  // width moe_intermediate_size (Mixtral: intermediate_size), num_experts_per_tok of them a token.
  // qwen3_moe: layer i is sparse when not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0,
  // else a dense MLP of intermediate_size; norm_topk_prob renormalises the top-k weights (Mixtral
  // always). output_router_logits adds router_aux_loss_coef times the load-balancing loss to the
  // training loss, as transformers' *ForCausalLM does.
  int64_t num_experts = 0, num_experts_per_tok = 0, moe_intermediate_size = 0, decoder_sparse_step = 1;
  bool norm_topk_prob = false, output_router_logits = false;
  double router_aux_loss_coef = 0.001;
  std::vector<int64_t> mlp_only_layers;
  // Read and written back untouched: bos_token_id, eos_token_id, pad_token_id, torch_dtype.
  nlohmann::json kept = nlohmann::json::object();

  // transformers' defaults of LlamaConfig, Qwen2Config, Qwen3Config or MistralConfig; lt::Error for another type.
  static LlamaConfig defaults(const std::string& model_type);
  static std::vector<std::string> preset_names();
  static LlamaConfig preset(const std::string& name);
  // A parsed config.json of model_type llama, qwen2, qwen3 or mistral (missing keys keep that type's
  // defaults), validated.
  static LlamaConfig from_json(const nlohmann::json& j);
  std::string to_json() const;  // loads in transformers as the matching *ForCausalLM
  // Field checks (one lt::Error line naming the field), then the size limit (check_model_size).
  void validate() const;
  int64_t kv_heads() const { return num_key_value_heads > 0 ? num_key_value_heads : num_attention_heads; }
  int64_t window_of(int64_t layer) const;  // the layer's sliding window, 0 for full attention
  int64_t head_size() const;  // head_dim, or hidden_size / num_attention_heads
  // embed_tokens' padding_idx (transformers builds it with pad_token_id): -1 for none.
  int64_t padding_idx() const;
  bool qkv_bias() const { return model_type == "qwen2" || (reads_attention_bias() && attention_bias); }
  bool o_bias() const { return reads_attention_bias() && attention_bias; }
  bool reads_attention_bias() const {
    return model_type == "llama" || model_type == "qwen3" || model_type == "qwen3_moe";
  }
  // Qwen3 (and Qwen3-MoE): q_norm and k_norm, RMSNorms [head_dim] over each head of q and k before RoPE.
  bool qk_norm() const { return model_type == "qwen3" || model_type == "qwen3_moe"; }
  bool moe() const { return model_type == "qwen3_moe" || model_type == "mixtral"; }
  bool sparse_layer(int64_t layer) const;  // an MoE layer (moe() only)
  int64_t expert_intermediate() const { return model_type == "mixtral" ? intermediate_size : moe_intermediate_size; }
  bool renorm_topk() const { return model_type == "mixtral" || norm_topk_prob; }
  bool gated_bias() const { return model_type == "llama" && mlp_bias; }
  double num_parameters() const;  // closed form, from the fields alone (no overflow for any values)
  // transformers' class names for this type: "Llama", "Qwen2", "Qwen3", "Mistral" (+ "DecoderLayer", ...).
  std::string class_prefix() const;
};

// A config.json RoPE object (rope_scaling, or transformers 5's rope_parameters, which may hold
// rope_theta) read into theta and scaling: default, linear or llama3; `key` names it in errors.
// null leaves both as they are.
void read_rope_object(const nlohmann::json& s, const std::string& key, double& theta, RopeScaling& scaling);

// RoPE inverse frequencies [head_dim / 2] as transformers computes them in f32: the default
// 1 / theta^(2i/D), then the scaling's (linear: / factor; llama3: _compute_llama3_parameters).
std::vector<float> rope_frequencies(int64_t head_dim, double theta, const RopeScaling& scaling);

// transformers' *ForCausalLM: model.{embed_tokens, layers.N.{input_layernorm, self_attn.{q,k,v,o}_proj,
// (qwen3: self_attn.{q,k}_norm), post_attention_layernorm, mlp.{gate,up,down}_proj}, norm, rotary_emb}, lm_head (absent when tied).
class Llama : public DecoderLM {
 public:
  Llama(const LlamaConfig& cfg, const nn::InitOptions& init);
  const char* type_name() const override { return type_.c_str(); }
  Tensor hidden_states(const Tensor& ids, const nn::TokenMask& mask = {}, int64_t pos_offset = 0) override;
  std::string model_type() const override { return cfg_.model_type; }
  std::string config_json() const override { return cfg_.to_json(); }
  bool reads_text_mask() const override { return aux_loss(); }
  // Accepts *ForCausalLM and bare *Model files ("model." added), skips a tied lm_head.weight and
  // the rotary_emb.inv_freq buffers older checkpoints hold.
  std::string checkpoint_key_to_name(const std::string& key) const override;
  // MoE models: the hub's per-expert tensors (Qwen3-MoE: mlp.experts.N.{gate,up,down}_proj;
  // Mixtral: block_sparse_moe.experts.N.w{1,3,2} and block_sparse_moe.gate); transformers 5's
  // fused tensors load too (checkpoint_key_to_name).
  std::vector<CheckpointTensor> checkpoint_tensors() const override;
  const LlamaConfig& config() const { return cfg_; }

 private:
  // The forward makes a load-balancing loss (a mixture of experts with output_router_logits).
  bool aux_loss() const { return cfg_.moe() && cfg_.output_router_logits && cfg_.router_aux_loss_coef > 0; }
  LlamaConfig cfg_;
  std::string type_;
  std::shared_ptr<nn::RotaryEmbedding> rotary_;
};

}  // namespace lt::models
