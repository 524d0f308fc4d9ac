// The model-independent parts: the loss, and building a model from a preset or a config.json.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "leantrain/error.h"
#include "leantrain/models.h"
#include "models/config_json.h"

namespace lt::models {

Tensor Model::loss(const Tensor& input, const Tensor& targets, const Tensor& mask) {
  Tensor logits = forward(input, mask);
  const int64_t V = logits.size(-1);
  LT_CHECK(targets.numel() * V == logits.numel(), "loss: targets have shape " + shape_str(targets.shape()),
           "logits are " + shape_str(logits.shape()) + " (one target per row expected)",
           "pass one class index per prediction");
  return cross_entropy(reshape(logits, {-1, V}), reshape(targets, {-1}));
}

Device Model::device() const {
  auto ps = parameters();
  LT_ASSERT(!ps.empty());
  return ps.front().device();
}

DType Model::dtype() const {
  auto ps = parameters();
  LT_ASSERT(!ps.empty());
  return ps.front().dtype();
}

std::vector<std::string> preset_names() { return {"gpt2-124m", "gpt2-tiny", "vit-tiny", "vit-b-16", "vit-l-16"}; }

std::shared_ptr<Model> create_model_from_json(const std::string& text, const nn::InitOptions& init) {
  nlohmann::json j = detail::parse_config(text);
  std::string type;
  detail::read_string(j, "model_type", type);
  if (type.empty()) type = j.contains("n_embd") ? "gpt2" : j.contains("hidden_size") ? "vit" : "";
  if (type == "gpt2") return std::make_shared<GPT2>(GPT2Config::from_json(text), init);
  if (type == "vit") return std::make_shared<ViT>(ViTConfig::from_json(text), init);
  fail("config.json: unknown model_type '" + type + "'", "leantrain builds gpt2 and vit",
       "set \"model_type\" to \"gpt2\" or \"vit\"");
}

std::shared_ptr<Model> create_model(const std::string& name, const nn::InitOptions& init) {
  for (const std::string& p : preset_names()) {
    if (name != p) continue;
    if (p.rfind("gpt2", 0) == 0) return std::make_shared<GPT2>(GPT2Config::preset(p), init);
    return std::make_shared<ViT>(ViTConfig::preset(p), init);
  }
  // A model directory (as Hugging Face lays them out) or the config.json itself.
  std::filesystem::path path = name;
  if (std::filesystem::is_directory(path)) path /= "config.json";
  std::ifstream f(path);
  if (!f) {
    std::string known;
    for (auto& p : preset_names()) known += (known.empty() ? "" : ", ") + p;
    fail("unknown model '" + name + "'", "it is neither a preset (" + known + ") nor a readable config.json",
         "pass a preset name or the path of a config.json");
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return create_model_from_json(ss.str(), init);
}

}  // namespace lt::models
