// The list of families and the lookups over it; the public factory (create_model) on top.
#include "models/registry.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "leantrain/error.h"
#include "models/config_json.h"

namespace lt::models {

namespace {

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

std::string known_types() {
  std::vector<std::string> t;
  for (const ModelFamily* f : model_families()) t.push_back(f->model_type());
  return joined(t);
}

}  // namespace

// Each family's file defines its function; a new family is that file and two lines here.
const ModelFamily& gpt2_family();
const ModelFamily& vit_family();
const ModelFamily& resnet_family();
const ModelFamily& llama_family(), &qwen2_family(), &qwen3_family(), &mistral_family(), &qwen3_moe_family(),
    &mixtral_family();  // llama_family.cpp
const ModelFamily& bert_family(), &roberta_family(), &distilbert_family(), &big_bird_family();  // encoder_family.cpp
const ModelFamily& gemma3_text_family(), &gemma3_family();  // gemma3_family.cpp
const ModelFamily& qwen3_5_text_family(), &qwen3_5_family();  // qwen3_5_family.cpp

const std::vector<const ModelFamily*>& model_families() {
  static const std::vector<const ModelFamily*> all{&gpt2_family(), &vit_family(), &llama_family(), &qwen2_family(),
                                                   &qwen3_family(), &mistral_family(), &resnet_family(), &bert_family(),
                                                   &roberta_family(), &distilbert_family(), &big_bird_family(),
                                                   &gemma3_text_family(), &gemma3_family(), &qwen3_moe_family(),
                                                   &mixtral_family(), &qwen3_5_text_family(), &qwen3_5_family()};
  return all;
}

const ModelFamily& family_of_type(const std::string& type) {
  for (const ModelFamily* f : model_families())
    if (f->model_type() == type) return *f;
  fail("unknown model_type '" + type + "'", "the known model types are " + known_types(),
       "set \"model_type\" to one of them");
}

const ModelFamily* family_of_preset(const std::string& name) {
  for (const ModelFamily* f : model_families())
    for (const std::string& p : f->presets())
      if (p == name) return f;
  return nullptr;
}

std::unique_ptr<ModelConfig> config_from_json(const std::string& text) {
  nlohmann::json j = detail::parse_config(text);
  auto it = j.find("model_type");
  LT_CHECK(it != j.end() && it->is_string(),
           it == j.end() ? std::string("config.json has no \"model_type\"")
                         : "config.json: \"model_type\" is " + it->dump() + ", not a string",
           "it names the model family; the known model types are " + known_types(),
           "add \"model_type\": \"" + model_families().front()->model_type() + "\" (or another known type)");
  const std::string type = it->get<std::string>();
  for (const ModelFamily* f : model_families())
    if (f->model_type() == type) return f->from_json(j);
  fail("config.json: unknown model_type '" + type + "'", "the known model types are " + known_types(),
       "set \"model_type\" to one of them");
}

std::unique_ptr<ModelConfig> config_from_preset(const std::string& name) {
  if (const ModelFamily* f = family_of_preset(name)) return f->preset(name);
  fail("unknown model '" + name + "'", "the presets are " + joined(preset_names()),
       "pass a preset name or the path of a config.json");
}

TokenInput ModelConfig::tokens() const {
  fail("a " + family().display_name() + " model reads no tokens", "it is an image model",
       "use a language model (e.g. gpt2-tiny) for text");
}

ImageInput ModelConfig::images() const {
  fail("a " + family().display_name() + " model reads no images", "it is a language model",
       "use an image model (e.g. vit-tiny) for images");
}

void ModelConfig::fit_images(int64_t, int64_t, int64_t) { (void)images(); }

SequenceInput ModelConfig::sequences() const {
  fail("a " + family().display_name() + " model does not classify text", "it reads " +
           std::string(family().input() == InputKind::Images ? "images" : "text to predict its next token"),
       "use a text classifier (e.g. bert-tiny) for labelled text");
}

void ModelConfig::fit_classes(const std::vector<std::string>&) { (void)sequences(); }

// ---------------------------------------------------------------- the public factory (models.h)

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const ModelFamily* f : model_families())
    for (const std::string& p : f->presets()) names.push_back(p);
  return names;
}

std::shared_ptr<Model> create_model_from_json(const std::string& text, const nn::InitOptions& init) {
  return config_from_json(text)->build(init);
}

std::shared_ptr<Model> create_model(const std::string& name, const nn::InitOptions& init) {
  if (family_of_preset(name)) return config_from_preset(name)->build(init);
  // A model directory (as Hugging Face lays them out) or the config.json itself.
  std::filesystem::path path = name;
  if (std::filesystem::is_directory(path)) path /= "config.json";
  std::ifstream f(path);
  if (!f)
    fail("unknown model '" + name + "'",
         "it is neither a preset (" + joined(preset_names()) + ") nor a readable config.json",
         "pass a preset name or the path of a config.json");
  std::stringstream ss;
  ss << f.rdbuf();
  return create_model_from_json(ss.str(), init);
}

}  // namespace lt::models
