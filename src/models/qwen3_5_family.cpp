// Qwen3.5 in the registry: model_type qwen3_5_text, and qwen3_5 (a multimodal checkpoint, of which
// leantrain builds the text tower and saves it as qwen3_5_text). A causal language model read
// through its tokenizer.json. --dim / --depth / --heads / --mlp-dim set hidden_size,
// num_hidden_layers, num_attention_heads and intermediate_size.
#include <nlohmann/json.hpp>

#include "leantrain/error.h"
#include "models/qwen3_5.h"
#include "models/registry.h"

namespace lt::models {

const ModelFamily& qwen3_5_text_family();
const ModelFamily& qwen3_5_family();

namespace {

class Qwen35Spec final : public ModelConfig {
 public:
  explicit Qwen35Spec(Qwen35Config c) : c_(std::move(c)) {}
  const ModelFamily& family() const override { return qwen3_5_text_family(); }
  std::string to_json() const override { return c_.to_json(); }
  void validate() const override { c_.validate(); }
  ModelSize size() const override { return {c_.num_parameters(), c_.num_hidden_layers}; }

  void apply_overrides(const SizeOverrides& o) override {
    LT_CHECK(!o.patch, "--patch " + std::to_string(o.patch), "Qwen3.5 has no patches", "drop --patch");
    if (o.dim) c_.hidden_size = o.dim;
    if (o.depth) {
      c_.num_hidden_layers = o.depth;
      c_.full.clear();  // full_attention_interval then lays out the new depth
    }
    if (o.heads) c_.num_attention_heads = o.heads;
    if (o.mlp_dim) c_.intermediate_size = o.mlp_dim;
    LT_CHECK(c_.num_attention_heads % c_.num_key_value_heads == 0,
             std::to_string(c_.num_attention_heads) + " heads do not divide into the model's " +
                 std::to_string(c_.num_key_value_heads) + " key/value heads",
             "each key/value head serves an equal group of query heads",
             "pass --heads as a multiple of " + std::to_string(c_.num_key_value_heads));
  }

  std::string size_summary() const override {
    int64_t full = 0;
    for (int64_t i = 0; i < c_.num_hidden_layers; ++i) full += c_.is_full(i);
    return "dim " + std::to_string(c_.hidden_size) + ", depth " + std::to_string(c_.num_hidden_layers) + " (" +
           std::to_string(c_.num_hidden_layers - full) + " DeltaNet, " + std::to_string(full) + " attention), heads " +
           std::to_string(c_.num_attention_heads) + " (" + std::to_string(c_.num_key_value_heads) + " kv), DeltaNet " +
           std::to_string(c_.linear_num_key_heads) + "/" + std::to_string(c_.linear_num_value_heads) + " heads, mlp " +
           std::to_string(c_.intermediate_size);
  }

  std::shared_ptr<Model> build(const nn::InitOptions& init) const override { return std::make_shared<Qwen35>(c_, init); }
  TokenInput tokens() const override { return {c_.vocab_size, c_.max_position_embeddings}; }

 private:
  Qwen35Config c_;
};

class Qwen35Family final : public ModelFamily {
 public:
  Qwen35Family(const char* type, std::vector<std::string> presets) : type_(type), presets_(std::move(presets)) {}
  std::string model_type() const override { return type_; }
  std::string display_name() const override { return "Qwen3.5"; }
  InputKind input() const override { return InputKind::Tokens; }
  bool causal() const override { return true; }
  std::string tokenizer() const override { return "tokenizer.json"; }
  std::vector<std::string> presets() const override { return presets_; }
  std::unique_ptr<ModelConfig> preset(const std::string& name) const override {
    return std::make_unique<Qwen35Spec>(Qwen35Config::preset(name));
  }
  std::unique_ptr<ModelConfig> from_json(const nlohmann::json& j) const override {
    return std::make_unique<Qwen35Spec>(Qwen35Config::from_json(j));
  }

 private:
  std::string type_;
  std::vector<std::string> presets_;
};

}  // namespace

// Listed in registry.cpp.
const ModelFamily& qwen3_5_text_family() {
  static const Qwen35Family f("qwen3_5_text", Qwen35Config::preset_names());
  return f;
}

const ModelFamily& qwen3_5_family() {
  static const Qwen35Family f("qwen3_5", {});
  return f;
}

}  // namespace lt::models
