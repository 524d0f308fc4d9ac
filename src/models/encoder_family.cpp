// The BERT family in the registry: four model_types (bert, roberta, distilbert, big_bird) over one config
// (EncoderConfig) and one model (EncoderClassifier). Text classifiers: they read padded token
// sequences and one label each; the data decides the classes (fit_classes). --dim / --depth /
// --heads / --mlp-dim set the hidden size, layers, heads and intermediate size.
#include <nlohmann/json.hpp>

#include "leantrain/error.h"
#include "models/encoder.h"
#include "models/registry.h"

namespace lt::models {

const ModelFamily& bert_family();
const ModelFamily& roberta_family();
const ModelFamily& distilbert_family();
const ModelFamily& big_bird_family();

namespace {

const ModelFamily& family_for(const std::string& type) {
  if (type == "roberta") return roberta_family();
  if (type == "distilbert") return distilbert_family();
  if (type == "big_bird") return big_bird_family();
  return bert_family();
}

class EncoderSpec final : public ModelConfig {
 public:
  explicit EncoderSpec(EncoderConfig c) : c_(std::move(c)) {}
  const ModelFamily& family() const override { return family_for(c_.model_type); }
  std::string to_json() const override { return c_.to_json(); }
  void validate() const override { c_.validate(); }
  ModelSize size() const override { return {c_.num_parameters(), c_.num_hidden_layers}; }

  void apply_overrides(const SizeOverrides& o) override {
    const std::string name = family().display_name();
    LT_CHECK(!o.patch, "--patch " + std::to_string(o.patch), name + " reads text, not patches", "drop --patch");
    if (o.dim) c_.hidden_size = o.dim;
    if (o.depth) c_.num_hidden_layers = o.depth;
    if (o.heads) c_.num_attention_heads = o.heads;
    if (o.mlp_dim) c_.intermediate_size = o.mlp_dim;
    LT_CHECK(c_.num_attention_heads > 0 && c_.hidden_size % c_.num_attention_heads == 0,
             "width " + std::to_string(c_.hidden_size) + " is not divisible by " +
                 std::to_string(c_.num_attention_heads) + " heads",
             "each head gets dim/heads channels", "pass --dim and --heads that divide");
  }

  std::string size_summary() const override {
    return "dim " + std::to_string(c_.hidden_size) + ", depth " + std::to_string(c_.num_hidden_layers) + ", heads " +
           std::to_string(c_.num_attention_heads) + ", mlp " + std::to_string(c_.intermediate_size) + ", " +
           std::to_string(c_.num_labels) + " classes";
  }

  std::shared_ptr<Model> build(const nn::InitOptions& init) const override {
    return std::make_shared<EncoderClassifier>(c_, init);
  }
  SequenceInput sequences() const override {
    return {c_.vocab_size, c_.context(), c_.pad_token_id, c_.num_labels};
  }
  void fit_classes(const std::vector<std::string>& names) override {
    c_.num_labels = int64_t(names.size());
    c_.labels = names;
  }

 private:
  EncoderConfig c_;
};

class EncoderFamily final : public ModelFamily {
 public:
  EncoderFamily(const char* type, const char* display, std::vector<std::string> presets)
      : type_(type), display_(display), presets_(std::move(presets)) {}
  std::string model_type() const override { return type_; }
  std::string display_name() const override { return display_; }
  InputKind input() const override { return InputKind::Sequences; }
  bool causal() const override { return false; }
  // Text as bytes by default; a model directory's tokenizer.json (WordPiece, byte-level BPE) or
  // --tokenizer replaces it.
  std::string tokenizer() const override { return "bytes"; }
  std::vector<std::string> presets() const override { return presets_; }
  std::unique_ptr<ModelConfig> preset(const std::string& name) const override {
    return std::make_unique<EncoderSpec>(EncoderConfig::preset(name));
  }
  std::unique_ptr<ModelConfig> from_json(const nlohmann::json& j) const override {
    return std::make_unique<EncoderSpec>(EncoderConfig::from_json(j));
  }

 private:
  std::string type_, display_;
  std::vector<std::string> presets_;
};

}  // namespace

// Listed in registry.cpp.
const ModelFamily& bert_family() {
  static const EncoderFamily f("bert", "BERT", {"bert-tiny", "bert-base-uncased"});
  return f;
}

const ModelFamily& roberta_family() {
  static const EncoderFamily f("roberta", "RoBERTa", {"roberta-tiny", "roberta-base"});
  return f;
}

const ModelFamily& distilbert_family() {
  static const EncoderFamily f("distilbert", "DistilBERT", {"distilbert-tiny", "distilbert-base-uncased"});
  return f;
}

const ModelFamily& big_bird_family() {
  static const EncoderFamily f("big_bird", "BigBird", {"bigbird-tiny", "bigbird-roberta-base"});
  return f;
}

}  // namespace lt::models
