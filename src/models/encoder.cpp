// BERT-family classifiers (models/encoder.h): embeddings, post-norm layers, each family's head.
//   BERT:       bert.{embeddings, encoder.layer.N, pooler.dense}, dropout, classifier
//               (pooler: tanh(dense(h[:, 0])); then dropout and classifier)
//   RoBERTa:    roberta.{embeddings, encoder.layer.N}, classifier.{dense, out_proj}
//               (dropout, dense, tanh, dropout, out_proj on h[:, 0])
//   DistilBERT: distilbert.{embeddings, transformer.layer.N}, pre_classifier, dropout, classifier
//               (relu(pre_classifier(h[:, 0])), dropout, classifier)
//   BigBird:    bert.{embeddings, encoder.layer.N}, classifier.{dense, out_proj}
//               (dropout, dense, hidden_act, dropout, out_proj on h[:, 0]); the embeddings apply
//               dropout before their LayerNorm; bert.pooler is not part of the classifier.
#include <cmath>

#include "leantrain/autocast.h"
#include "leantrain/error.h"
#include "models/encoder.h"

namespace lt::models {

namespace {

class Embeddings : public nn::Module {
 public:
  Embeddings(const EncoderConfig& c, nn::ParamFactory& pf, const std::string& type) : type_(type) {
    // transformers zeroes the padding rows of the tables built with padding_idx (RoBERTa's
    // positions too). A model about to be loaded keeps whatever the checkpoint has there.
    const nn::Init init = nn::Init::normal(c.initializer_range);
    word = register_module("word_embeddings", std::make_shared<nn::Embedding>(pf, c.vocab_size, c.hidden_size,
                                                                              init.with_zero_row(c.pad_token_id)));
    const int64_t position_pad = c.model_type == "roberta" ? c.pad_token_id : -1;
    position = register_module("position_embeddings", std::make_shared<nn::Embedding>(pf, c.max_position_embeddings, c.hidden_size,
                                                                                      init.with_zero_row(position_pad)));
    if (c.type_vocab_size > 0)
      token_type = register_module("token_type_embeddings",
                                   std::make_shared<nn::Embedding>(pf, c.type_vocab_size, c.hidden_size, init));
    ln = register_module("LayerNorm", std::make_shared<nn::LayerNorm>(pf, c.hidden_size, c.layer_norm_eps));
    drop = register_module("dropout", std::make_shared<nn::Dropout>(c.hidden_dropout_prob, pf.next_seed()));
  }
  const char* type_name() const override { return type_.c_str(); }
  std::string type_;
  std::shared_ptr<nn::Embedding> word, position, token_type;
  std::shared_ptr<nn::LayerNorm> ln;
  std::shared_ptr<nn::Dropout> drop;
};

}  // namespace

EncoderClassifier::EncoderClassifier(const EncoderConfig& cfg, const nn::InitOptions& init)
    : cfg_(cfg), type_(cfg.class_prefix() + "ForSequenceClassification") {
  cfg_.validate();
  nn::ParamFactory pf(init);
  const std::string p = cfg_.class_prefix();
  const nn::Init w_init = nn::Init::normal(cfg_.initializer_range);
  const nn::LinearOptions lin{.weight_init = w_init};
  auto base = register_module(cfg_.base_name(), std::make_shared<nn::ModuleGroup>(cfg_.distil() ? "DistilBertModel" : p + "Model"));
  auto emb = base->hold("embeddings", std::make_shared<Embeddings>(cfg_, pf, cfg_.distil() ? "Embeddings" : p + "Embeddings"));
  word_ = emb->word, position_ = emb->position, token_type_ = emb->token_type, emb_ln_ = emb->ln, emb_drop_ = emb->drop;
  auto encoder = base->hold(cfg_.distil() ? "transformer" : "encoder",
                           std::make_shared<nn::ModuleGroup>(cfg_.distil() ? "Transformer" : p + "Encoder"));
  layers_ = encoder->hold("layer", std::make_shared<nn::ModuleList>());
  nn::EncoderLayerOptions lo{.hidden = cfg_.hidden_size,
                             .heads = cfg_.num_attention_heads,
                             .intermediate = cfg_.intermediate_size,
                             .eps = cfg_.layer_norm_eps,
                             .dropout = cfg_.hidden_dropout_prob,
                             .approx = cfg_.gelu_approx(),
                             .init = w_init,
                             .naming = cfg_.distil() ? nn::EncoderNaming::DistilBert : nn::EncoderNaming::Bert,
                             .type = cfg_.distil()      ? "TransformerBlock"
                                     : p == "Roberta"   ? "RobertaLayer"
                                     : cfg_.big_bird()  ? "BigBirdLayer"
                                                        : "BertLayer",
                             .prefix = p == "Roberta" ? "Roberta" : cfg_.big_bird() ? "BigBird" : "Bert",
                             .block_sparse = std::nullopt};
  if (cfg_.block_sparse()) lo.block_sparse = nn::BlockSparseOptions{cfg_.block_size, cfg_.num_random_blocks};
  for (int64_t i = 0; i < cfg_.num_hidden_layers; ++i) layers_->append(std::make_shared<nn::PostNormEncoderLayer>(pf, lo));
  const int64_t h = cfg_.hidden_size;
  if (cfg_.model_type == "bert") {
    auto pooler = base->hold("pooler", std::make_shared<nn::ModuleGroup>("BertPooler"));
    pooler_ = pooler->hold("dense", std::make_shared<nn::Linear>(pf, h, h, lin));
    head_drop_ = register_module("dropout", std::make_shared<nn::Dropout>(cfg_.head_dropout(), pf.next_seed()));
    classifier_ = register_module("classifier", std::make_shared<nn::Linear>(pf, h, cfg_.num_labels, lin));
  } else if (cfg_.model_type == "roberta" || cfg_.big_bird()) {
    auto head = register_module("classifier", std::make_shared<nn::ModuleGroup>(p + "ClassificationHead"));
    dense_ = head->hold("dense", std::make_shared<nn::Linear>(pf, h, h, lin));
    head_drop_ = head->hold("dropout", std::make_shared<nn::Dropout>(cfg_.head_dropout(), pf.next_seed()));
    classifier_ = head->hold("out_proj", std::make_shared<nn::Linear>(pf, h, cfg_.num_labels, lin));
  } else {
    dense_ = register_module("pre_classifier", std::make_shared<nn::Linear>(pf, h, h, lin));
    classifier_ = register_module("classifier", std::make_shared<nn::Linear>(pf, h, cfg_.num_labels, lin));
    head_drop_ = register_module("dropout", std::make_shared<nn::Dropout>(cfg_.head_dropout(), pf.next_seed()));
  }
  pf.materialize();
}

Tensor EncoderClassifier::embed(const Tensor& ids) {
  const int64_t T = ids.size(1), off = cfg_.position_offset();
  Tensor x = (*word_)(ids);  // [B, T, H] in the compute dtype
  if (cfg_.rescale_embeddings) x = scale(x, std::sqrt(double(cfg_.hidden_size)));
  Tensor pos = slice(autocast_like(position_->weight(), x), 0, off, off + T);
  x = add(x, pos);
  // Single texts: every token has type 0, so the type embedding is its row 0.
  if (token_type_) x = add(x, select(autocast_like(token_type_->weight(), x), 0, 0));
  if (cfg_.big_bird()) return (*emb_ln_)((*emb_drop_)(x));  // BigBirdEmbeddings: dropout, then the norm
  return (*emb_drop_)((*emb_ln_)(x));
}

Tensor EncoderClassifier::head(const Tensor& first) {
  if (pooler_) return (*classifier_)((*head_drop_)(tanh((*pooler_)(first))));
  if (cfg_.model_type == "roberta")
    return (*classifier_)((*head_drop_)(tanh((*dense_)((*head_drop_)(first)))));
  if (cfg_.big_bird())
    return (*classifier_)((*head_drop_)(gelu((*dense_)((*head_drop_)(first)), cfg_.gelu_approx())));
  return (*classifier_)((*head_drop_)(relu((*dense_)(first))));
}

Tensor EncoderClassifier::forward(const Tensor& ids, const nn::TokenMask& token_mask) {
  LT_CHECK(ids.dim() == 2 && (ids.dtype() == DType::I64 || ids.dtype() == DType::I32),
           type_ + " input: ids are " + std::string(dtype_name(ids.dtype())) + " " + shape_str(ids.shape()),
           "expected i64 (or i32) token ids [B, T]", "pass a batch of token sequences");
  LT_CHECK(!token_mask.doc_pos.defined(), type_ + " input: packed documents",
           "an encoder classifies one text per row", "pass one text per row");
  const Tensor& mask_in = token_mask.key_padding;
  const int64_t T = ids.size(1);
  // Block-sparse BigBird pads the batch to whole blocks with pad tokens (masked), as transformers'
  // _pad_to_block_size; only the first token's output is read, so nothing is cut off again.
  const int64_t padded = cfg_.sparse_at(T) ? (T + cfg_.block_size - 1) / cfg_.block_size * cfg_.block_size : T;
  LT_CHECK(T >= 1 && padded <= cfg_.context(),
           type_ + " input: " + std::to_string(T) + " positions" +
               (padded != T ? " (" + std::to_string(padded) + " in whole blocks)" : std::string()),
           "the model has " + std::to_string(cfg_.context()), "pass between 1 and that many tokens per row");
  Tensor mask;
  if (mask_in.defined()) {
    LT_CHECK(mask_in.shape() == ids.shape(), type_ + ": attention mask " + shape_str(mask_in.shape()),
             "it must have the ids' shape " + shape_str(ids.shape()), "pass one flag per token");
    mask = mask_in.dtype() == DType::U8 ? mask_in : cast(mask_in, DType::U8);
  }
  Tensor in = ids;
  if (padded != T) {
    const int64_t B = ids.size(0);
    in = concat({ids, full({B, padded - T}, double(cfg_.pad_token_id), ids.dtype(), ids.device())}, 1);
    if (mask.defined()) mask = concat({mask, zeros({B, padded - T}, DType::U8, ids.device())}, 1);
  }
  if (!mask.defined()) mask = padding_mask(in, cfg_.pad_token_id);
  Tensor x = embed(in);
  for (size_t i = 0; i < layers_->size(); ++i) x = layers_->at<nn::PostNormEncoderLayer>(i)(x, mask);
  return head(select(x, 1, 0));
}

std::string EncoderClassifier::checkpoint_key_to_name(const std::string& key) const {
  // Pretraining and other task heads: a base checkpoint fine-tuned into a classifier.
  for (const char* skip : {"cls.", "lm_head.", "vocab_transform.", "vocab_layer_norm.", "vocab_projector.", "qa_outputs."})
    if (key.rfind(skip, 0) == 0) return "";
  if (key.ends_with("position_ids")) return "";  // a buffer of older transformers
  std::string k = key;
  // A base model's file (BertModel) names its tensors without the prefix.
  const std::string prefix = cfg_.base_name() + ".";
  if (cfg_.big_bird() && (k.rfind("bert.pooler.", 0) == 0 || k.rfind("pooler.", 0) == 0)) return "";  // unused by the head
  if (k.rfind(prefix, 0) != 0 && (k.rfind("embeddings.", 0) == 0 || k.rfind("encoder.", 0) == 0 ||
                                  k.rfind("transformer.", 0) == 0 || k.rfind("pooler.", 0) == 0))
    k = prefix + k;
  if (k.ends_with("LayerNorm.gamma")) k.replace(k.size() - 5, 5, "weight");
  else if (k.ends_with("LayerNorm.beta")) k.replace(k.size() - 4, 4, "bias");
  return k;
}

}  // namespace lt::models
