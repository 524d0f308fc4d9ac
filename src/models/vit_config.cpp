#include <cmath>
#include <nlohmann/json.hpp>

#include "leantrain/models.h"
#include "core/checked_math.h"
#include "models/config_json.h"
#include "models/size_limits.h"

namespace lt::models {
using namespace detail;

ViTConfig ViTConfig::preset(const std::string& name) {
  ViTConfig c;  // defaults are ViT-B/16 (224x224x3, 1000 classes)
  if (name == "vit-b-16") return c;
  if (name == "vit-l-16") {
    c.hidden_size = 1024;
    c.num_hidden_layers = 24;
    c.num_attention_heads = 16;
    c.intermediate_size = 4096;
    return c;
  }
  if (name == "vit-tiny") {  // Fashion-MNIST on a laptop CPU: 16 patches of 7x7, ~0.15M parameters
    c.image_size = 28;
    c.patch_size = 7;
    c.num_channels = 1;
    c.hidden_size = 64;
    c.num_hidden_layers = 4;
    c.num_attention_heads = 4;
    c.intermediate_size = 128;
    c.num_labels = 10;
    return c;
  }
  fail("unknown ViT preset '" + name + "'", "known: vit-tiny, vit-b-16, vit-l-16", "use one of those or a config.json");
}

ViTConfig ViTConfig::from_json(const std::string& text) {
  nlohmann::json j = parse_config(text);
  check_model_type(j, "vit");
  ViTConfig c;
  // transformers writes only the values that differ from its ViTConfig's defaults, and two of
  // those differ from torchvision's (the presets'): layer_norm_eps 1e-12 and 2 labels.
  c.layer_norm_eps = 1e-12;
  c.num_labels = 2;
  read_int(j, "image_size", c.image_size);
  read_int(j, "patch_size", c.patch_size);
  read_int(j, "num_channels", c.num_channels);
  read_int(j, "hidden_size", c.hidden_size);
  read_int(j, "num_hidden_layers", c.num_hidden_layers);
  read_int(j, "num_attention_heads", c.num_attention_heads);
  read_int(j, "intermediate_size", c.intermediate_size);
  if (auto it = j.find("id2label"); it != j.end() && it->is_object()) c.num_labels = int64_t(it->size());
  read_int(j, "num_labels", c.num_labels);
  read_double(j, "layer_norm_eps", c.layer_norm_eps);
  read_double(j, "hidden_dropout_prob", c.dropout);
  std::string act = "gelu";
  read_string(j, "hidden_act", act);
  LT_CHECK(act == "gelu", "ViT config: hidden_act '" + act + "' is not supported",
           "the torchvision ViT MLP uses exact (erf) GELU", "set hidden_act to \"gelu\"");
  bool qkv_bias = true;
  read_bool(j, "qkv_bias", qkv_bias);
  LT_CHECK(qkv_bias, "ViT config: qkv_bias false is not supported", "leantrain's ViT attention has q, k and v biases",
           "set qkv_bias to true");
  c.validate();
  return c;
}

std::string ViTConfig::to_json() const {
  nlohmann::json j = {{"model_type", "vit"},
                      {"architectures", {"ViTForImageClassification"}},
                      {"qkv_bias", true},
                      {"attention_probs_dropout_prob", 0.0},
                      {"image_size", image_size},
                      {"patch_size", patch_size},
                      {"num_channels", num_channels},
                      {"hidden_size", hidden_size},
                      {"num_hidden_layers", num_hidden_layers},
                      {"num_attention_heads", num_attention_heads},
                      {"intermediate_size", intermediate_size},
                      {"num_labels", num_labels},
                      {"layer_norm_eps", layer_norm_eps},
                      {"hidden_dropout_prob", dropout},
                      {"hidden_act", "gelu"}};
  return j.dump(2);
}

int64_t ViTConfig::num_patches() const {
  LT_CHECK(patch_size > 0, "ViT config: patch_size = " + std::to_string(patch_size), "it must be positive",
           "fix the config");
  const int64_t side = image_size / patch_size;
  return checked_mul(side, side, "ViT patch count (image_size / patch_size)^2", "use a smaller image_size");
}

double ViTConfig::num_parameters() const {
  const double S = double(image_size), p = double(patch_size), Ch = double(num_channels), D = double(hidden_size);
  const double L = double(num_hidden_layers), F = double(intermediate_size), K = double(num_labels);
  const double side = patch_size > 0 ? std::floor(S / p) : 0, N = side * side;
  // Per block: ln_1 and ln_2 (4D), in_proj (3D^2 + 3D), out_proj (D^2 + D), mlp.0 (FD + F), mlp.3 (DF + D).
  const double block = 4 * D * D + 2 * D * F + 9 * D + F;
  // conv_proj, class_token, pos_embedding, the blocks, encoder.ln, heads.head
  return D * Ch * p * p + D + D + (N + 1) * D + L * block + 2 * D + D * K + K;
}

void ViTConfig::validate() const {
  check_positive("ViT", "image_size", image_size);
  check_positive("ViT", "patch_size", patch_size);
  check_positive("ViT", "num_channels", num_channels);
  check_positive("ViT", "hidden_size", hidden_size);
  check_positive("ViT", "num_hidden_layers", num_hidden_layers);
  check_positive("ViT", "num_attention_heads", num_attention_heads);
  check_positive("ViT", "intermediate_size", intermediate_size);
  check_positive("ViT", "num_labels", num_labels);
  LT_CHECK(image_size % patch_size == 0, "ViT config: image_size " + std::to_string(image_size),
           "is not divisible by patch_size " + std::to_string(patch_size), "choose a patch size that divides it");
  LT_CHECK(hidden_size % num_attention_heads == 0, "ViT config: hidden_size " + std::to_string(hidden_size),
           "is not divisible by num_attention_heads " + std::to_string(num_attention_heads),
           "choose a head count that divides it");
  LT_CHECK(layer_norm_eps > 0, "ViT config: layer_norm_eps must be positive", "got " + std::to_string(layer_norm_eps),
           "use e.g. 1e-6");
  LT_CHECK(dropout >= 0 && dropout < 1, "ViT config: hidden_dropout_prob = " + std::to_string(dropout),
           "a dropout probability is in [0, 1)", "fix the config");
  check_class_count("ViT", num_labels);
  check_model_size("ViT", {num_parameters(), num_hidden_layers}, "num_hidden_layers",
                   "image_size, patch_size, hidden_size, num_hidden_layers, intermediate_size or num_labels");
  (void)num_patches();  // fits, given the size check; computed checked all the same
}

}  // namespace lt::models
