// The one registry of model families. Everything that depends on which family a model is (its
// presets, how its config.json reads, which size flags apply, how it is built, whether its
// attention is causal, how its text is tokenized) is asked of its family here; the trainer,
// `generate`, the planner and the profiler hold no family names. A family lives in one file
// (gpt2_family.cpp, vit_family.cpp) and is listed once in registry.cpp.
#pragma once
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "leantrain/models.h"
#include "models/size_limits.h"

namespace lt::models {

class ModelFamily;

// Sizes from the command line (--dim, --depth, --heads, --patch, --mlp-dim); 0 keeps the config's.
struct SizeOverrides {
  int64_t dim = 0, depth = 0, heads = 0, patch = 0, mlp_dim = 0;
  bool any() const { return dim || depth || heads || patch || mlp_dim; }
};

// Tokens: a language model (next-token targets); Images: an image classifier; Sequences: a text
// classifier (one label per padded token sequence, the BERT family).
enum class InputKind { Tokens, Images, Sequences };

// What a token model reads: ids below vocab_size, at most context of them.
struct TokenInput {
  int64_t vocab_size = 0, context = 0;
};

// What an image model reads: [B, channels, size, size] images, cut into patch x patch pieces,
// classified into `classes`.
struct ImageInput {
  int64_t size = 0, channels = 0, patch = 0, classes = 0;
};

// What a sequence classifier reads: token ids below vocab_size, right-padded with pad_id to at
// most context positions (pad_id never appears as a token), classified into `classes`.
struct SequenceInput {
  int64_t vocab_size = 0, context = 0, pad_id = 0, classes = 0;
};

// One model's configuration, whatever its family: a GPT2Config or a ViTConfig behind one face.
class ModelConfig {
 public:
  virtual ~ModelConfig() = default;
  virtual const ModelFamily& family() const = 0;
  virtual std::string to_json() const = 0;  // Hugging Face-style config.json, with model_type
  // Field checks, checked size arithmetic and the size limit (check_model_size); lt::Error.
  virtual void validate() const = 0;
  // The closed-form parameter count and depth, from the config alone (any values, no overflow).
  virtual ModelSize size() const = 0;
  // Applies the flags' sizes; lt::Error for a flag the family has no use for. Call validate() after.
  virtual void apply_overrides(const SizeOverrides& o) = 0;
  // "dim 128, depth 4, heads 4": the sizes, for the run's description line.
  virtual std::string size_summary() const = 0;
  virtual std::shared_ptr<Model> build(const nn::InitOptions& init) const = 0;

  // Token models (family().input() == Tokens).
  virtual TokenInput tokens() const;
  // Image models: what the images are; fit_images makes the model read the data's images.
  virtual ImageInput images() const;
  virtual void fit_images(int64_t size, int64_t channels, int64_t classes);
  // Sequence classifiers: what they read; fit_classes gives the classifier the data's classes
  // (their names, when the data has them, go to config.json's id2label).
  virtual SequenceInput sequences() const;
  virtual void fit_classes(const std::vector<std::string>& names);
};

class ModelFamily {
 public:
  virtual ~ModelFamily() = default;
  virtual std::string model_type() const = 0;    // config.json's "model_type": "gpt2"
  virtual std::string display_name() const = 0;  // "GPT-2"
  virtual InputKind input() const = 0;
  // Attention sees only earlier positions (a language model: attention FLOPs halve, it can generate).
  virtual bool causal() const = 0;
  // How text becomes ids for this family's models ("bytes"); "" for image models.
  virtual std::string tokenizer() const = 0;
  virtual std::vector<std::string> presets() const = 0;
  virtual std::unique_ptr<ModelConfig> preset(const std::string& name) const = 0;
  // A parsed config.json object: the family's keys read, then validated.
  virtual std::unique_ptr<ModelConfig> from_json(const nlohmann::json& j) const = 0;
};

// Every family, in the order help texts list them.
const std::vector<const ModelFamily*>& model_families();
// The family whose model_type is `type`; lt::Error listing the known types otherwise.
const ModelFamily& family_of_type(const std::string& type);
// The family with preset `name`, or nullptr.
const ModelFamily* family_of_preset(const std::string& name);

// A config.json's text: its "model_type" picks the family (required: no guessing from keys).
std::unique_ptr<ModelConfig> config_from_json(const std::string& text);
// A preset name; lt::Error listing the presets otherwise.
std::unique_ptr<ModelConfig> config_from_preset(const std::string& name);

}  // namespace lt::models
