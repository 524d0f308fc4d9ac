// ResNetConfig: presets (torchvision's resnet18 ... resnet152 and a small one for the CPU),
// config.json in Hugging Face ResNetConfig's keys, validation and the closed-form size.
#include <nlohmann/json.hpp>

#include "leantrain/error.h"
#include "models/config_json.h"
#include "models/resnet.h"
#include "models/size_limits.h"

namespace lt::models {
using namespace detail;

namespace {

std::string list_str(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

void read_ints(const nlohmann::json& j, const char* key, std::vector<int64_t>& out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return;
  LT_CHECK(it->is_array(), std::string("config.json: '") + key + "' must be a list of integers",
           "found " + it->dump(), "write e.g. [3, 4, 6, 3]");
  std::vector<int64_t> v;
  for (const auto& e : *it) {
    LT_CHECK(e.is_number_integer() && (!e.is_number_unsigned() || e.get<uint64_t>() <= uint64_t(INT64_MAX)),
             std::string("config.json: '") + key + "' holds " + e.dump(), "every entry must be a whole number",
             "write e.g. [3, 4, 6, 3]");
    v.push_back(e.get<int64_t>());
  }
  out = std::move(v);
}

}  // namespace

std::vector<std::string> ResNetConfig::preset_names() {
  return {"resnet-tiny", "resnet18", "resnet34", "resnet50", "resnet101", "resnet152"};
}

ResNetConfig ResNetConfig::preset(const std::string& name) {
  ResNetConfig c;  // defaults are resnet50 (224x224x3, 1000 classes)
  if (name == "resnet18" || name == "resnet34") {
    c.layer_type = "basic";
    c.depths = name == "resnet18" ? std::vector<int64_t>{2, 2, 2, 2} : std::vector<int64_t>{3, 4, 6, 3};
    c.hidden_sizes = {64, 128, 256, 512};
    return c;
  }
  if (name == "resnet50") return c;
  if (name == "resnet101") {
    c.depths = {3, 4, 23, 3};
    return c;
  }
  if (name == "resnet152") {
    c.depths = {3, 8, 36, 3};
    return c;
  }
  if (name == "resnet-tiny") {  // Fashion-MNIST on a laptop CPU: one narrow BasicBlock per stage, 0.31M parameters
    c.layer_type = "basic";
    c.depths = {1, 1, 1, 1};
    c.embedding_size = 16;
    c.hidden_sizes = {16, 32, 64, 128};
    c.num_channels = 1;
    c.num_labels = 10;
    c.image_size = 28;
    return c;
  }
  std::string known;
  for (const std::string& p : preset_names()) known += (known.empty() ? "" : ", ") + p;
  fail("unknown ResNet preset '" + name + "'", "known: " + known, "use one of those or a config.json");
}

ResNetConfig ResNetConfig::from_json(const std::string& text) {
  nlohmann::json j = parse_config(text);
  check_model_type(j, "resnet");
  ResNetConfig c;
  read_string(j, "layer_type", c.layer_type);
  read_ints(j, "depths", c.depths);
  read_ints(j, "layers", c.depths);  // torchvision's name for the same list
  read_int(j, "embedding_size", c.embedding_size);
  read_ints(j, "hidden_sizes", c.hidden_sizes);
  read_int(j, "num_channels", c.num_channels);
  if (auto it = j.find("id2label"); it != j.end() && it->is_object()) c.num_labels = int64_t(it->size());
  read_int(j, "num_labels", c.num_labels);
  read_int(j, "image_size", c.image_size);
  read_bool(j, "channels_last", c.channels_last);
  std::string act = "relu";
  read_string(j, "hidden_act", act);
  LT_CHECK(act == "relu", "ResNet config: hidden_act '" + act + "' is not supported", "torchvision's ResNet uses ReLU",
           "set hidden_act to \"relu\"");
  bool flag = false;
  read_bool(j, "downsample_in_first_stage", flag);
  LT_CHECK(!flag, "ResNet config: downsample_in_first_stage true is not supported",
           "torchvision's first stage keeps the stem's resolution", "set it to false");
  flag = true;
  read_bool(j, "downsample_in_bottleneck", flag);
  LT_CHECK(flag || c.layer_type == "basic", "ResNet config: downsample_in_bottleneck false is not supported",
           "torchvision's Bottleneck (v1.5) strides its 3x3 conv", "set it to true");
  c.validate();
  return c;
}

std::string ResNetConfig::to_json() const {
  nlohmann::json j = {{"model_type", "resnet"},
                      {"architectures", {"ResNetForImageClassification"}},
                      {"layer_type", layer_type},
                      {"depths", depths},
                      {"embedding_size", embedding_size},
                      {"hidden_sizes", hidden_sizes},
                      {"num_channels", num_channels},
                      {"num_labels", num_labels},
                      {"image_size", image_size},
                      {"hidden_act", "relu"},
                      {"downsample_in_first_stage", false},
                      {"downsample_in_bottleneck", true}};
  if (!channels_last) j["channels_last"] = false;
  return j.dump(2);
}

double ResNetConfig::num_parameters() const {
  const double C = double(num_channels), E = double(embedding_size), K = double(num_labels);
  double n = C * E * 49 + 2 * E;  // conv1, bn1
  double in = E;
  const bool basic = layer_type == "basic";
  for (size_t s = 0; s < depths.size() && s < hidden_sizes.size(); ++s) {
    const double out = double(hidden_sizes[s]), p = out / double(expansion());
    for (int64_t b = 0; b < depths[s]; ++b) {
      if (basic) n += in * p * 9 + 2 * p + p * p * 9 + 2 * p;
      else n += in * p + 2 * p + p * p * 9 + 2 * p + p * out + 2 * out;
      if ((s > 0 && b == 0) || in != out) n += in * out + 2 * out;  // downsample.0 and .1
      in = out;
    }
  }
  return n + in * K + K;  // fc
}

void ResNetConfig::validate() const {
  LT_CHECK(layer_type == "basic" || layer_type == "bottleneck", "ResNet config: layer_type '" + layer_type + "'",
           "it is \"basic\" (resnet18/34) or \"bottleneck\" (resnet50 and deeper)", "set one of those");
  LT_CHECK(!depths.empty() && depths.size() == hidden_sizes.size(),
           "ResNet config: depths " + list_str(depths) + " and hidden_sizes " + list_str(hidden_sizes),
           "each stage needs a block count and an output width (the lists must have one length, at least 1)",
           "give both lists one entry per stage");
  for (size_t s = 0; s < depths.size(); ++s) {
    LT_CHECK(depths[s] >= 1 && depths[s] <= kMaxLayers, "ResNet config: depths " + list_str(depths),
             "each stage has 1 to " + std::to_string(kMaxLayers) + " blocks", "fix the config");
    LT_CHECK(hidden_sizes[s] >= 1 && hidden_sizes[s] % expansion() == 0,
             "ResNet config: hidden_sizes " + list_str(hidden_sizes),
             "each is a positive multiple of the block's expansion (" + std::to_string(expansion()) + " for " +
                 layer_type + ")",
             "fix the config");
  }
  check_positive("ResNet", "embedding_size", embedding_size);
  check_positive("ResNet", "num_channels", num_channels);
  check_positive("ResNet", "num_labels", num_labels);
  check_positive("ResNet", "image_size", image_size);
  check_class_count("ResNet", num_labels);
  int64_t blocks = 0;
  for (int64_t d : depths) blocks += d;
  check_model_size("ResNet", {num_parameters(), blocks}, "depths",
                   "embedding_size, hidden_sizes, depths, num_channels or num_labels");
}

}  // namespace lt::models
