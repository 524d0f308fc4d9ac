// ResNet in the registry: an image classifier whose presets fix its widths and depths (no size
// flags apply); the data decides the input channels, image size and classes (fit_images).
#include <nlohmann/json.hpp>

#include "leantrain/error.h"
#include "models/registry.h"
#include "models/resnet.h"

namespace lt::models {

const ModelFamily& resnet_family();

namespace {

class ResNetSpec final : public ModelConfig {
 public:
  explicit ResNetSpec(ResNetConfig c) : c_(std::move(c)) {}
  const ModelFamily& family() const override { return resnet_family(); }
  std::string to_json() const override { return c_.to_json(); }
  void validate() const override { c_.validate(); }
  ModelSize size() const override {
    int64_t blocks = 0;
    for (int64_t d : c_.depths) blocks += d;
    return {c_.num_parameters(), blocks};
  }

  void apply_overrides(const SizeOverrides& o) override {
    LT_CHECK(!o.any(), "--dim, --depth, --heads, --patch and --mlp-dim do not apply to a ResNet",
             "its widths and depths are the config's hidden_sizes, embedding_size and depths",
             "drop the flag, or pass a config.json with other sizes");
  }

  std::string size_summary() const override {
    std::string d;
    for (int64_t x : c_.depths) d += (d.empty() ? "" : ",") + std::to_string(x);
    return c_.layer_type + " blocks [" + d + "], stem " + std::to_string(c_.embedding_size) + ", width " +
           std::to_string(c_.hidden_sizes.back());
  }

  std::shared_ptr<Model> build(const nn::InitOptions& init) const override { return std::make_shared<ResNet>(c_, init); }
  // Patch 1: a ResNet reads pixels, not patches.
  ImageInput images() const override { return {c_.image_size, c_.num_channels, 1, c_.num_labels}; }
  void fit_images(int64_t size, int64_t channels, int64_t classes) override {
    c_.image_size = size;
    c_.num_channels = channels;
    c_.num_labels = classes;
  }

 private:
  ResNetConfig c_;
};

class ResNetFamily final : public ModelFamily {
 public:
  std::string model_type() const override { return "resnet"; }
  std::string display_name() const override { return "ResNet"; }
  InputKind input() const override { return InputKind::Images; }
  bool causal() const override { return false; }
  std::string tokenizer() const override { return ""; }
  std::vector<std::string> presets() const override { return ResNetConfig::preset_names(); }
  std::unique_ptr<ModelConfig> preset(const std::string& name) const override {
    return std::make_unique<ResNetSpec>(ResNetConfig::preset(name));
  }
  std::unique_ptr<ModelConfig> from_json(const nlohmann::json& j) const override {
    return std::make_unique<ResNetSpec>(ResNetConfig::from_json(j.dump()));
  }
};

}  // namespace

const ModelFamily& resnet_family() {  // listed in registry.cpp
  static const ResNetFamily f;
  return f;
}

}  // namespace lt::models
