#pragma once
// A causal language model's place in the registry, shared by the decoders (the LLaMA family's
// six model_types, Gemma 3, Qwen3.5): one ModelConfig over the decoder's config and one
// ModelFamily per model_type. What differs between decoders comes from a Traits struct:
//   using Config, Net;                                   the config struct and the model it builds
//   static const ModelFamily& family(const Config&);     the entry a config saves under
//   static void set_depth(Config&, int64_t);             --depth (and the per-layer layout it resets)
//   static int64_t kv_heads(const Config&);
//   static bool fixed_head_dim(const Config&);           head_dim set apart from hidden / heads
//   static std::string summary(const Config&);           size_summary()
// Config has hidden_size, num_hidden_layers, num_attention_heads, intermediate_size, vocab_size,
// max_position_embeddings, validate(), to_json(), num_parameters(), preset(), from_json().
// --dim / --depth / --heads / --mlp-dim set hidden_size, num_hidden_layers, num_attention_heads and
// intermediate_size; a decoder reads text through a tokenizer.json (--tokenizer, or the model
// directory's).
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "leantrain/error.h"
#include "models/registry.h"

namespace lt::models {

template <class Traits>
class DecoderSpec final : public ModelConfig {
 public:
  using Config = typename Traits::Config;
  explicit DecoderSpec(Config c) : c_(std::move(c)) {}
  const ModelFamily& family() const override { return Traits::family(c_); }
  std::string to_json() const override { return c_.to_json(); }
  void validate() const override { c_.validate(); }
  ModelSize size() const override { return {c_.num_parameters(), c_.num_hidden_layers}; }

  void apply_overrides(const SizeOverrides& o) override {
    LT_CHECK(!o.patch, "--patch " + std::to_string(o.patch), family().display_name() + " has no patches",
             "drop --patch");
    if (o.dim) c_.hidden_size = o.dim;
    if (o.depth) Traits::set_depth(c_, o.depth);
    if (o.heads) c_.num_attention_heads = o.heads;
    if (o.mlp_dim) c_.intermediate_size = o.mlp_dim;
    LT_CHECK(c_.num_attention_heads > 0 && (Traits::fixed_head_dim(c_) || c_.hidden_size % c_.num_attention_heads == 0),
             "width " + std::to_string(c_.hidden_size) + " is not divisible by " +
                 std::to_string(c_.num_attention_heads) + " heads",
             "each head gets dim/heads channels", "pass --dim and --heads that divide");
    const int64_t kv = Traits::kv_heads(c_);
    LT_CHECK(c_.num_attention_heads % kv == 0,
             std::to_string(c_.num_attention_heads) + " heads do not divide into the model's " + std::to_string(kv) +
                 " key/value heads",
             "each key/value head serves an equal group of query heads", "pass --heads as a multiple of " + std::to_string(kv));
  }

  std::string size_summary() const override { return Traits::summary(c_); }
  std::shared_ptr<Model> build(const nn::InitOptions& init) const override {
    return std::make_shared<typename Traits::Net>(c_, init);
  }
  TokenInput tokens() const override { return {c_.vocab_size, c_.max_position_embeddings}; }

 private:
  Config c_;
};

template <class Traits>
class DecoderFamily final : public ModelFamily {
 public:
  DecoderFamily(const char* type, const char* display, std::vector<std::string> presets)
      : type_(type), display_(display), presets_(std::move(presets)) {}
  std::string model_type() const override { return type_; }
  std::string display_name() const override { return display_; }
  InputKind input() const override { return InputKind::Tokens; }
  bool causal() const override { return true; }
  std::string tokenizer() const override { return "tokenizer.json"; }
  std::vector<std::string> presets() const override { return presets_; }
  std::unique_ptr<ModelConfig> preset(const std::string& name) const override {
    return std::make_unique<DecoderSpec<Traits>>(Traits::Config::preset(name));
  }
  std::unique_ptr<ModelConfig> from_json(const nlohmann::json& j) const override {
    return std::make_unique<DecoderSpec<Traits>>(Traits::Config::from_json(j));
  }

 private:
  std::string type_, display_;
  std::vector<std::string> presets_;
};

}  // namespace lt::models
