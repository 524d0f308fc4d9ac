// The LLaMA family in the registry: four model_types (llama, qwen2, qwen3, mistral) over one config
// (LlamaConfig) and one model (Llama). Causal language models; text as bytes until the family
// reads its checkpoint's tokenizer. --dim / --depth / --heads / --mlp-dim set hidden_size,
// num_hidden_layers, num_attention_heads and intermediate_size.
#include <nlohmann/json.hpp>

#include "leantrain/error.h"
#include "models/llama.h"
#include "models/registry.h"

namespace lt::models {

const ModelFamily& llama_family();
const ModelFamily& qwen2_family();
const ModelFamily& mistral_family();
const ModelFamily& qwen3_family();
const ModelFamily& qwen3_moe_family();
const ModelFamily& mixtral_family();

namespace {

const ModelFamily& family_for(const std::string& type) {
  if (type == "qwen2") return qwen2_family();
  if (type == "qwen3") return qwen3_family();
  if (type == "mistral") return mistral_family();
  if (type == "qwen3_moe") return qwen3_moe_family();
  if (type == "mixtral") return mixtral_family();
  return llama_family();
}

class LlamaSpec final : public ModelConfig {
 public:
  explicit LlamaSpec(LlamaConfig c) : c_(std::move(c)) {}
  const ModelFamily& family() const override { return family_for(c_.model_type); }
  std::string to_json() const override { return c_.to_json(); }
  void validate() const override { c_.validate(); }
  ModelSize size() const override { return {c_.num_parameters(), c_.num_hidden_layers}; }

  void apply_overrides(const SizeOverrides& o) override {
    const std::string name = family().display_name();
    LT_CHECK(!o.patch, "--patch " + std::to_string(o.patch), name + " has no patches", "drop --patch");
    if (o.dim) c_.hidden_size = o.dim;
    if (o.depth) {
      c_.num_hidden_layers = o.depth;
      c_.layer_sliding.clear();  // max_window_layers then lays out the new depth
    }
    if (o.heads) c_.num_attention_heads = o.heads;
    if (o.mlp_dim) c_.intermediate_size = o.mlp_dim;
    LT_CHECK(c_.num_attention_heads > 0 && (c_.head_dim > 0 || c_.hidden_size % c_.num_attention_heads == 0),
             "width " + std::to_string(c_.hidden_size) + " is not divisible by " +
                 std::to_string(c_.num_attention_heads) + " heads",
             "each head gets dim/heads channels", "pass --dim and --heads that divide");
    LT_CHECK(c_.num_attention_heads % c_.kv_heads() == 0,
             std::to_string(c_.num_attention_heads) + " heads do not divide into the model's " +
                 std::to_string(c_.kv_heads()) + " key/value heads",
             "each key/value head serves an equal group of query heads",
             "pass --heads as a multiple of " + std::to_string(c_.kv_heads()));
  }

  std::string size_summary() const override {
    std::string s = "dim " + std::to_string(c_.hidden_size) + ", depth " + std::to_string(c_.num_hidden_layers) +
                    ", heads " + std::to_string(c_.num_attention_heads);
    if (c_.kv_heads() != c_.num_attention_heads) s += " (" + std::to_string(c_.kv_heads()) + " kv)";
    if (c_.moe())
      return s + ", " + std::to_string(c_.num_experts) + " experts of " + std::to_string(c_.expert_intermediate()) +
             " (" + std::to_string(c_.num_experts_per_tok) + " a token)";
    return s + ", mlp " + std::to_string(c_.intermediate_size);
  }

  std::shared_ptr<Model> build(const nn::InitOptions& init) const override { return std::make_shared<Llama>(c_, init); }
  TokenInput tokens() const override { return {c_.vocab_size, c_.max_position_embeddings}; }

 private:
  LlamaConfig c_;
};

class LlamaFamily final : public ModelFamily {
 public:
  LlamaFamily(const char* type, const char* display, std::vector<std::string> presets)
      : type_(type), display_(display), presets_(std::move(presets)) {}
  std::string model_type() const override { return type_; }
  std::string display_name() const override { return display_; }
  InputKind input() const override { return InputKind::Tokens; }
  bool causal() const override { return true; }
  // LLaMA-family models read text through a tokenizer.json (--tokenizer, or the model directory's).
  std::string tokenizer() const override { return "tokenizer.json"; }
  std::vector<std::string> presets() const override { return presets_; }
  std::unique_ptr<ModelConfig> preset(const std::string& name) const override {
    return std::make_unique<LlamaSpec>(LlamaConfig::preset(name));
  }
  std::unique_ptr<ModelConfig> from_json(const nlohmann::json& j) const override {
    return std::make_unique<LlamaSpec>(LlamaConfig::from_json(j));
  }

 private:
  std::string type_, display_;
  std::vector<std::string> presets_;
};

}  // namespace

// Listed in registry.cpp.
const ModelFamily& llama_family() {
  static const LlamaFamily f("llama", "LLaMA",
                             {"llama-tiny", "smollm2-135m", "tinyllama-1.1b", "llama3.2-1b", "llama3-8b"});
  return f;
}

const ModelFamily& qwen2_family() {
  static const LlamaFamily f("qwen2", "Qwen2", {"qwen2-0.5b"});
  return f;
}

const ModelFamily& qwen3_family() {
  static const LlamaFamily f("qwen3", "Qwen3", {"qwen3-tiny", "qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-8b"});
  return f;
}

const ModelFamily& mistral_family() {
  static const LlamaFamily f("mistral", "Mistral", {});
  return f;
}

const ModelFamily& qwen3_moe_family() {
  static const LlamaFamily f("qwen3_moe", "Qwen3-MoE", {"qwen3-moe-tiny", "qwen3-30b-a3b"});
  return f;
}

const ModelFamily& mixtral_family() {
  static const LlamaFamily f("mixtral", "Mixtral", {"mixtral-tiny", "mixtral-8x7b"});
  return f;
}

}  // namespace lt::models
