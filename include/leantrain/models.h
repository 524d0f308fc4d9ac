// Models with the exact parameter names and shapes of their reference implementations, so
// reference checkpoints load by name: GPT-2 as transformers' GPT2LMHeadModel, ViT as
// torchvision's VisionTransformer. Each is built from a config struct, a preset name or a
// Hugging Face-style config.json.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "leantrain/nn.h"

namespace lt::models {

// One tensor of a model's Hugging Face checkpoint: the file tensor `name` holds rows
// [row, row + rows) along dim 0 of parameter (or buffer) `param`; rows < 0: all of it.
struct CheckpointTensor {
  std::string name, param;
  int64_t row = 0, rows = -1;
  bool buffer = false;  // a buffer: a checkpoint without it leaves it as built
};

// What the training loop and the CLI see of any model.
class Model : public nn::Module {
 public:
  // GPT-2: token ids i32/i64 [B, T] -> logits [B, T, V]; mask.key_padding u8/i64 [B, T] (1 = real
  // token); mask.doc_pos i32 [B, T] for rows of packed documents (nn::TokenMask: the causal LMs
  // attend within each document, positions restarting at 0). A Tensor converts to a key-padding mask.
  // ViT: images [B, C, H, W] (any floating dtype; cast to the parameters') -> logits [B, classes].
  virtual Tensor forward(const Tensor& input, const nn::TokenMask& mask = {}) = 0;
  // Mean cross-entropy of forward(input) against targets (i64, -100 = ignored). For GPT-2 the
  // targets are already shifted ([B, T], target t is the token after input t).
  // With set_loss_chunk(n > 0) and a head that is one bias-free linear (the causal LMs), the head
  // and the loss run n rows at a time (linear_cross_entropy): the [N, V] logits never exist.
  Tensor loss(const Tensor& input, const Tensor& targets, const nn::TokenMask& mask = {});
  void set_loss_chunk(int64_t rows) { loss_chunk_ = rows; }
  // The summed cross-entropy through linear_cross_entropy (evaluation of a causal LM with
  // set_loss_chunk(n > 0): no [N, V] logits); undefined when the chunked head does not apply.
  Tensor chunked_loss_sum(const Tensor& input, const Tensor& targets, const nn::TokenMask& mask = {});
  int64_t loss_chunk() const { return loss_chunk_; }
  // The cross-entropy of each target, shaped as `targets` (0 where ignored): the negated
  // log-probability of each target token, which a preference loss sums per sequence. Goes
  // through the chunked head as loss() does (set_loss_chunk), so no [N, V] logits then.
  Tensor token_losses(const Tensor& input, const Tensor& targets, const nn::TokenMask& mask = {});
  virtual std::string model_type() const = 0;  // "gpt2", "vit"
  virtual std::string config_json() const = 0;  // Hugging Face-style config.json text
  // Where the parameters live and their dtype.
  Device device() const;
  DType dtype() const;
  // Forward FLOPs the root computes itself, outside any module, for an input of shape `input`
  // (GPT-2's tied LM head, a matmul with wte); the planner adds them to the modules' own.
  virtual double root_forward_flops(const Shape& input) const { return 0; }
  // The tensors of this model's Hugging Face checkpoint (what `--save` writes and a model
  // directory loads), in save order. Default: every parameter (a tied weight once, under its
  // first name) and buffer, whole, under its own name. Other names a file may use for whole
  // parameters go through checkpoint_key_to_name.
  virtual std::vector<CheckpointTensor> checkpoint_tensors() const;
  // Modules outside the transformer blocks whose trainable parameters nothing but their own
  // forward call reads (not a tied head's GEMM, not a chunked loss): fsdp gathers them around
  // that call alone instead of keeping them on every rank. Default: none.
  virtual std::vector<nn::Module*> standalone_modules() { return {}; }
  // The embedding table that the LM head reads too (tied weights): its gradient is the head's
  // dense part plus the lookup's rows. Undefined (the default) when there is none.
  virtual Tensor tied_table() const { return Tensor(); }
  // Whether loss() reads mask.text (a mixture-of-experts model's load-balancing loss leaves the
  // padding out): the training loader then stages a text mask with each batch. Default: no.
  virtual bool reads_text_mask() const { return false; }

 protected:
  // What linear_cross_entropy needs of a model whose head is one bias-free linear: the hidden
  // rows [..., C] and the head's weight [V, C], both as the head's GEMM would read them (cast
  // under autocast). Undefined (the default) when the head is anything else; then loss() goes
  // through forward().
  struct HeadInputs {
    Tensor hidden, weight;
  };
  virtual HeadInputs loss_head_inputs(const Tensor& input, const nn::TokenMask& mask) { return {}; }
  // A decoder's mask checked against ids [B, T]: key_padding [B, T] cast to u8, doc_pos i32 [B, T]
  // (not with a position offset: packed rows start their documents at 0), text u8 [B, T]. `name`
  // is the model's.
  static nn::TokenMask decoder_mask(const std::string& name, const nn::TokenMask& mask, int64_t B, int64_t T,
                                    int64_t pos_offset);
  // standalone_modules() of a causal LM: none when the head is tied to the table (`head` null),
  // else the table, and the head unless a chunked loss reads its weight directly.
  std::vector<nn::Module*> untied_table_and_head(nn::Module* table, nn::Module* head) const;

 private:
  int64_t loss_chunk_ = 0;
};

// A model that predicts the next token (GPT-2): what sampling needs.
class CausalLM : public Model {
 public:
  virtual int64_t vocab_size() const = 0;
  virtual int64_t context_length() const = 0;
  // Logits [1, V] of the token after ids [1, T]; only the last position goes through the head.
  virtual Tensor next_token_logits(const Tensor& ids) = 0;

  // Autoregressive sampling under InferenceModeGuard (no activations kept), in eval mode.
  // Returns prompt + new tokens. temperature <= 0: greedy; top_k <= 0: full vocabulary.
  // The context is cropped to the last context_length() tokens. on_token sees each new token.
  // Sampling stops after any of stop_tokens (e.g. the tokenizer's EOS, a chat template's
  // end-of-turn tokens) and draws only ids below sample_below (0: the whole vocabulary; a
  // tokenizer smaller than the embedding table).
  std::vector<int64_t> generate(const std::vector<int64_t>& prompt, int64_t max_new_tokens, double temperature = 1.0,
                                int64_t top_k = 0, uint64_t seed = 0,
                                const std::function<void(int64_t)>& on_token = nullptr,
                                const std::vector<int64_t>& stop_tokens = {}, int64_t sample_below = 0);
};

// ---------------------------------------------------------------- GPT-2

struct GPT2Config {
  int64_t vocab_size = 50257, n_positions = 1024, n_embd = 768, n_layer = 12, n_head = 12;
  int64_t n_inner = 0;  // MLP width; 0 (null in config.json) means 4 * n_embd
  double layer_norm_epsilon = 1e-5;
  std::string activation_function = "gelu_new";  // gelu_new / gelu_pytorch_tanh (tanh), gelu (erf)
  double resid_pdrop = 0.1, embd_pdrop = 0.1;
  // Accepted for config compatibility but not applied: attention has no probability dropout.
  double attn_pdrop = 0.1;
  // true (Hugging Face's GPT-2): logits = h wte^T. false: a separate lm_head.weight [V, C].
  bool tie_word_embeddings = true;

  static GPT2Config preset(const std::string& name);  // "gpt2-124m", "gpt2-tiny"
  // HF keys; missing keys keep defaults. A "model_type" other than "gpt2" is an error.
  static GPT2Config from_json(const std::string& text);
  std::string to_json() const;
  // Throws lt::Error naming the bad field, or the parameter count when the model is too large
  // for any machine (models/size_limits.h).
  void validate() const;
  GeluApprox gelu_approx() const;
  int64_t mlp_width() const;  // n_inner, or 4 * n_embd when it is 0 (checked: lt::Error on overflow)
  double num_parameters() const;  // closed form, from the fields alone (no overflow for any values)
};

// transformers' GPT2LMHeadModel: transformer.{wte, wpe, drop, h.{i}, ln_f}; lm_head tied to wte
// (not a separate parameter) unless tie_word_embeddings is false.
class GPT2 : public CausalLM {
 public:
  GPT2(const GPT2Config& cfg, const nn::InitOptions& init);
  const char* type_name() const override { return "GPT2LMHeadModel"; }
  Tensor forward(const Tensor& ids, const nn::TokenMask& mask = {}) override;
  // Final hidden states [B, T, C] (after ln_f). pos_offset: position of ids[:, 0] (for a KV cache);
  // with mask.doc_pos the learned positions are the documents' own.
  Tensor hidden_states(const Tensor& ids, const nn::TokenMask& mask = {}, int64_t pos_offset = 0);
  std::string model_type() const override { return "gpt2"; }
  std::string config_json() const override { return cfg_.to_json(); }
  double root_forward_flops(const Shape& input) const override;
  // Accepts both GPT2LMHeadModel and GPT2Model files: adds "transformer.", skips the tied
  // lm_head.weight and the attn.bias / attn.masked_bias buffers of older checkpoints.
  std::string checkpoint_key_to_name(const std::string& key) const override;
  const GPT2Config& config() const { return cfg_; }

  int64_t vocab_size() const override { return cfg_.vocab_size; }
  int64_t context_length() const override { return cfg_.n_positions; }
  Tensor next_token_logits(const Tensor& ids) override;
  std::vector<nn::Module*> standalone_modules() override;
  Tensor tied_table() const override;

 private:
  Tensor head(const Tensor& hidden);  // [..., C] -> logits [..., V]
  HeadInputs loss_head_inputs(const Tensor& input, const nn::TokenMask& mask) override;
  GPT2Config cfg_;
  std::shared_ptr<nn::Embedding> wte_, wpe_;
  std::shared_ptr<nn::Dropout> drop_;
  std::shared_ptr<nn::ModuleList> h_;
  std::shared_ptr<nn::LayerNorm> ln_f_;
  std::shared_ptr<nn::Linear> lm_head_;  // only when untied
};

// Draws one token from logits: temperature scaling, top-k filtering, then inverse-CDF sampling
// with the counter-based uniform rng_uniform(seed, counter). temperature <= 0 picks the argmax.
int64_t sample_token(const std::vector<float>& logits, double temperature, int64_t top_k, uint64_t seed,
                     uint64_t counter);

// ---------------------------------------------------------------- ViT

struct ViTConfig {
  int64_t image_size = 224, patch_size = 16, num_channels = 3;
  int64_t hidden_size = 768, num_hidden_layers = 12, num_attention_heads = 12, intermediate_size = 3072;
  int64_t num_labels = 1000;
  double layer_norm_eps = 1e-6;
  double dropout = 0.0;  // after the position embedding and in the MLP (torchvision's `dropout`)

  static ViTConfig preset(const std::string& name);  // "vit-tiny", "vit-b-16", "vit-l-16"
  // HF ViTConfig keys; num_labels may also come from id2label. Missing keys keep defaults.
  static ViTConfig from_json(const std::string& text);
  std::string to_json() const;
  void validate() const;  // as GPT2Config::validate
  int64_t num_patches() const;  // (image_size / patch_size)^2 (checked: lt::Error on overflow or patch 0)
  double num_parameters() const;  // closed form, from the fields alone
};

// torchvision's VisionTransformer: conv_proj, class_token, encoder.{pos_embedding,
// layers.encoder_layer_{i}, ln}, heads.head. Pre-LN, GELU (erf), classification from token 0.
class ViT : public Model {
 public:
  ViT(const ViTConfig& cfg, const nn::InitOptions& init);
  const char* type_name() const override { return "VisionTransformer"; }
  Tensor forward(const Tensor& images, const nn::TokenMask& mask = {}) override;
  std::string model_type() const override { return "vit"; }
  std::string config_json() const override { return cfg_.to_json(); }
  // transformers' ViTForImageClassification names (vit.embeddings..., vit.encoder.layer.N...,
  // classifier); in_proj_weight/bias split into query, key and value (models/vit_checkpoint.cpp).
  // Files with torchvision's names (leantrain's own before) load as they are.
  std::vector<CheckpointTensor> checkpoint_tensors() const override;
  const ViTConfig& config() const { return cfg_; }

 private:
  ViTConfig cfg_;
  std::shared_ptr<nn::PatchEmbedding> conv_proj_;
  Tensor* class_token_ = nullptr;
  Tensor* pos_embedding_ = nullptr;
  std::shared_ptr<nn::Dropout> drop_;
  std::shared_ptr<nn::ModuleList> layers_;
  std::shared_ptr<nn::LayerNorm> ln_;
  std::shared_ptr<nn::Linear> head_;
};

// ---------------------------------------------------------------- factory (models/registry.h)

std::vector<std::string> preset_names();
// A preset name, or a path to a config.json (its "model_type", required, picks the family).
// Throws lt::Error for an unknown name, a missing file or a bad config.
std::shared_ptr<Model> create_model(const std::string& preset_or_config_path, const nn::InitOptions& init);
std::shared_ptr<Model> create_model_from_json(const std::string& config_text, const nn::InitOptions& init);

}  // namespace lt::models
