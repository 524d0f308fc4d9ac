// GPT-2 in the registry: a causal language model over bytes, sized by n_embd / n_layer / n_head /
// n_inner, which --dim / --depth / --heads / --mlp-dim override.
#include <nlohmann/json.hpp>

#include "leantrain/error.h"
#include "models/registry.h"

namespace lt::models {

const ModelFamily& gpt2_family();

namespace {

class Gpt2Spec final : public ModelConfig {
 public:
  explicit Gpt2Spec(GPT2Config c) : c_(std::move(c)) {}
  const ModelFamily& family() const override { return gpt2_family(); }
  std::string to_json() const override { return c_.to_json(); }
  void validate() const override { c_.validate(); }
  ModelSize size() const override { return {c_.num_parameters(), c_.n_layer}; }

  void apply_overrides(const SizeOverrides& o) override {
    LT_CHECK(!o.patch, "--patch " + std::to_string(o.patch), "GPT-2 has no patches", "drop --patch");
    if (o.dim) c_.n_embd = o.dim;
    if (o.depth) c_.n_layer = o.depth;
    if (o.heads) c_.n_head = o.heads;
    if (o.mlp_dim) c_.n_inner = o.mlp_dim;
    LT_CHECK(c_.n_head > 0 && c_.n_embd % c_.n_head == 0,
             "width " + std::to_string(c_.n_embd) + " is not divisible by " + std::to_string(c_.n_head) + " heads",
             "each head gets dim/heads channels", "pass --dim and --heads that divide");
  }

  std::string size_summary() const override {
    return "dim " + std::to_string(c_.n_embd) + ", depth " + std::to_string(c_.n_layer) + ", heads " +
           std::to_string(c_.n_head) + (c_.n_inner > 0 ? ", mlp " + std::to_string(c_.n_inner) : "");
  }

  std::shared_ptr<Model> build(const nn::InitOptions& init) const override { return std::make_shared<GPT2>(c_, init); }
  TokenInput tokens() const override { return {c_.vocab_size, c_.n_positions}; }

 private:
  GPT2Config c_;
};

class Gpt2Family final : public ModelFamily {
 public:
  std::string model_type() const override { return "gpt2"; }
  std::string display_name() const override { return "GPT-2"; }
  InputKind input() const override { return InputKind::Tokens; }
  bool causal() const override { return true; }
  std::string tokenizer() const override { return "bytes"; }
  std::vector<std::string> presets() const override { return {"gpt2-124m", "gpt2-tiny"}; }
  std::unique_ptr<ModelConfig> preset(const std::string& name) const override {
    return std::make_unique<Gpt2Spec>(GPT2Config::preset(name));
  }
  std::unique_ptr<ModelConfig> from_json(const nlohmann::json& j) const override {
    return std::make_unique<Gpt2Spec>(GPT2Config::from_json(j.dump()));
  }
};

}  // namespace

const ModelFamily& gpt2_family() {  // listed in registry.cpp
  static const Gpt2Family f;
  return f;
}

}  // namespace lt::models
