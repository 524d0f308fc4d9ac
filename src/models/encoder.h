// BERT-family text classifiers as transformers computes them: BertForSequenceClassification,
// RobertaForSequenceClassification and DistilBertForSequenceClassification, with transformers'
// parameter names, so their checkpoints (a pretrained encoder, with or without the classifier)
// load by name. Post-norm layers (nn_encoder.h), learned positions, token types where the family
// has them (every token of type 0: single texts), and each family's head on the first token.
//
// Padding: a batch is right-padded with pad_token_id, and the key padding mask is ids !=
// pad_token_id (made on the device). Pad positions see the real tokens but no token sees them, so
// the first token, and the logits, are what transformers computes with attention_mask.
// RoBERTa numbers positions from pad_token_id + 1 as transformers does for real tokens (its pad
// positions get pad_token_id, ours count on; they reach no output).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "leantrain/models.h"
#include "leantrain/nn_encoder.h"

namespace lt::models {

struct EncoderConfig {
  // "bert", "roberta", "distilbert" or "big_bird": the family, its config keys and defaults (transformers').
  std::string model_type = "bert";
  int64_t vocab_size = 30522, hidden_size = 768, num_hidden_layers = 12, num_attention_heads = 12,
          intermediate_size = 3072, max_position_embeddings = 512;
  int64_t type_vocab_size = 2;  // 0 for DistilBERT (no token types)
  int64_t pad_token_id = 0;
  int64_t num_labels = 2;
  double layer_norm_eps = 1e-12, initializer_range = 0.02;
  double hidden_dropout_prob = 0.1;
  // Read and written back, not applied: attention has no probability dropout (as GPT-2's).
  double attention_probs_dropout_prob = 0.1;
  double classifier_dropout = -1;  // < 0: null (BERT/RoBERTa use hidden_dropout_prob); DistilBERT's seq_classif_dropout
  std::string hidden_act = "gelu";  // gelu (erf), gelu_new / gelu_pytorch_tanh (tanh)
  std::vector<std::string> labels;  // id2label names; empty: LABEL_0 ...
  // BigBird: "block_sparse" or "original_full"; blocks of block_size positions, random key blocks
  // per query block; rescale_embeddings multiplies the word embeddings by sqrt(hidden_size).
  std::string attention_type = "original_full";
  int64_t block_size = 64, num_random_blocks = 3;
  bool rescale_embeddings = false;
  // Read and written back untouched: bos/eos ids, architectures, torch_dtype, ...
  nlohmann::json kept = nlohmann::json::object();

  static EncoderConfig defaults(const std::string& model_type);
  static std::vector<std::string> preset_names();
  static EncoderConfig preset(const std::string& name);
  static EncoderConfig from_json(const nlohmann::json& j);  // validated
  std::string to_json() const;  // loads in transformers as the matching *ForSequenceClassification
  void validate() const;
  double num_parameters() const;  // closed form, from the fields alone
  bool distil() const { return model_type == "distilbert"; }
  bool big_bird() const { return model_type == "big_bird"; }
  bool block_sparse() const { return big_bird() && attention_type == "block_sparse"; }
  // A batch of T positions runs block-sparse (padded to whole blocks) when it is longer than
  // (5 + 2 random blocks) blocks; shorter ones attend in full, as transformers switches to original_full.
  bool sparse_at(int64_t T) const { return block_sparse() && T > (5 + 2 * num_random_blocks) * block_size; }
  // The base model's module name: "bert" for BigBird (transformers' BigBirdForSequenceClassification.bert).
  std::string base_name() const { return big_bird() ? "bert" : model_type; }
  // The position of the first token: RoBERTa counts from pad_token_id + 1.
  int64_t position_offset() const { return model_type == "roberta" ? pad_token_id + 1 : 0; }
  int64_t context() const { return max_position_embeddings - position_offset(); }
  double head_dropout() const;
  GeluApprox gelu_approx() const;
  std::string class_prefix() const;  // "Bert", "Roberta", "DistilBert", "BigBird"
};

class EncoderClassifier : public Model {
 public:
  EncoderClassifier(const EncoderConfig& cfg, const nn::InitOptions& init);
  const char* type_name() const override { return type_.c_str(); }
  // ids i32/i64 [B, T] right-padded with pad_token_id -> logits [B, num_labels]. mask: u8/i64
  // [B, T] (1 = a real token) overrides the one read from the padding.
  Tensor forward(const Tensor& ids, const nn::TokenMask& mask = {}) override;
  std::string model_type() const override { return cfg_.model_type; }
  std::string config_json() const override { return cfg_.to_json(); }
  // Checkpoints of the pretraining heads (cls.*, lm_head.*, vocab_*) are read without them; the
  // TF-era LayerNorm.gamma / .beta names and position_ids buffers are understood.
  std::string checkpoint_key_to_name(const std::string& key) const override;
  const EncoderConfig& config() const { return cfg_; }

 private:
  Tensor embed(const Tensor& ids);
  Tensor head(const Tensor& first);  // [B, H] -> [B, labels]
  EncoderConfig cfg_;
  std::string type_;
  std::shared_ptr<nn::Embedding> word_, position_, token_type_;
  std::shared_ptr<nn::LayerNorm> emb_ln_;
  std::shared_ptr<nn::Dropout> emb_drop_, head_drop_;
  std::shared_ptr<nn::ModuleList> layers_;
  std::shared_ptr<nn::Linear> pooler_, dense_, classifier_;  // pooler: BERT; dense: RoBERTa/DistilBERT's first
};

}  // namespace lt::models
