// ViT in the registry: an image classifier, sized by hidden_size / num_hidden_layers /
// num_attention_heads / patch_size / intermediate_size, which --dim / --depth / --heads / --patch /
// --mlp-dim override; the data decides image size, channels and classes (fit_images).
#include <nlohmann/json.hpp>

#include "leantrain/error.h"
#include "models/registry.h"

namespace lt::models {

const ModelFamily& vit_family();

namespace {

class VitSpec final : public ModelConfig {
 public:
  explicit VitSpec(ViTConfig c) : c_(std::move(c)) {}
  const ModelFamily& family() const override { return vit_family(); }
  std::string to_json() const override { return c_.to_json(); }
  void validate() const override { c_.validate(); }
  ModelSize size() const override { return {c_.num_parameters(), c_.num_hidden_layers}; }

  void apply_overrides(const SizeOverrides& o) override {
    if (o.dim) c_.hidden_size = o.dim;
    if (o.depth) c_.num_hidden_layers = o.depth;
    if (o.heads) c_.num_attention_heads = o.heads;
    if (o.patch) c_.patch_size = o.patch;
    if (o.mlp_dim) c_.intermediate_size = o.mlp_dim;
    LT_CHECK(c_.num_attention_heads > 0 && c_.hidden_size % c_.num_attention_heads == 0,
             "width " + std::to_string(c_.hidden_size) + " is not divisible by " +
                 std::to_string(c_.num_attention_heads) + " heads",
             "each head gets dim/heads channels", "pass --dim and --heads that divide");
    LT_CHECK(!o.patch || o.patch < 0 || c_.image_size % o.patch == 0,
             "--patch " + std::to_string(o.patch) + " does not divide the image size " + std::to_string(c_.image_size),
             "a ViT cuts images into whole patches", "pass a --patch that divides " + std::to_string(c_.image_size));
  }

  std::string size_summary() const override {
    return "patch " + std::to_string(c_.patch_size) + ", dim " + std::to_string(c_.hidden_size) + ", depth " +
           std::to_string(c_.num_hidden_layers) + ", heads " + std::to_string(c_.num_attention_heads) + ", mlp " +
           std::to_string(c_.intermediate_size);
  }

  std::shared_ptr<Model> build(const nn::InitOptions& init) const override { return std::make_shared<ViT>(c_, init); }
  ImageInput images() const override { return {c_.image_size, c_.num_channels, c_.patch_size, c_.num_labels}; }
  void fit_images(int64_t size, int64_t channels, int64_t classes) override {
    c_.image_size = size;
    c_.num_channels = channels;
    c_.num_labels = classes;
  }

 private:
  ViTConfig c_;
};

class VitFamily final : public ModelFamily {
 public:
  std::string model_type() const override { return "vit"; }
  std::string display_name() const override { return "ViT"; }
  InputKind input() const override { return InputKind::Images; }
  bool causal() const override { return false; }
  std::string tokenizer() const override { return ""; }
  std::vector<std::string> presets() const override { return {"vit-tiny", "vit-b-16", "vit-l-16"}; }
  std::unique_ptr<ModelConfig> preset(const std::string& name) const override {
    return std::make_unique<VitSpec>(ViTConfig::preset(name));
  }
  std::unique_ptr<ModelConfig> from_json(const nlohmann::json& j) const override {
    return std::make_unique<VitSpec>(ViTConfig::from_json(j.dump()));
  }
};

}  // namespace

const ModelFamily& vit_family() {  // listed in registry.cpp
  static const VitFamily f;
  return f;
}

}  // namespace lt::models
