// --quantize nf4: a model whose block linear layers are frozen NF4 (nn::Nf4Linear, bitsandbytes'
// Linear4bit), and whose MoE experts are NF4 stacks (nn::MoeExperts, quantised), built without
// ever holding the whole model in 16-bit: the model is laid out with
// its parameters deferred (nn::InitOptions::deferred), everything but those layers' weights gets
// its store, then each layer's 16-bit weight is made in a temporary (drawn with the values a
// plain build gives it, or read from the model directory), quantised into the NF4 store and
// freed. A directory saved by bitsandbytes (config.json "quantization_config") is read as it is.
// The planner runs the same code on meta, so `plan` sees the same peak (docs/memory-model.md).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "leantrain/models.h"
#include "models/registry.h"
#include "quant/bnb_config.h"
#include "train/checkpoint_weights.h"

namespace lt {

// The checked quantization_config of `dir`'s config.json, or nothing when it has none (an
// unquantised model). lt::Error for one leantrain cannot load (FP4, 8-bit, no double quant, ...).
std::optional<BnbQuantConfig> model_dir_quantization(const std::string& dir);

// The paths of the linear layers --quantize nf4 turns into NF4: every Linear / Conv1D inside an
// entry of a ModuleList (a block; not an entry itself, as ViT's heads.head); embeddings, heads,
// norms and ViT's fused in_proj stay as they are. A module named in `skip` (bitsandbytes'
// llm_int8_skip_modules: a path, or a name it ends with) is left out.
std::vector<std::string> nf4_target_paths(nn::Module& m, const std::vector<std::string>& skip = {});
// The mixture-of-experts experts modules (nn::MoeExperts) --quantize nf4 turns into NF4 experts
// (their stacked weights as NF4 stacks, each expert's projection a state of its own), less those
// named in `skip` as above.
std::vector<std::string> nf4_expert_target_paths(nn::Module& m, const std::vector<std::string>& skip = {});

struct QuantizedModel {
  std::shared_ptr<models::Model> model;
  int64_t layers = 0;        // NF4 layers
  int64_t expert_layers = 0;  // NF4 experts modules (one per sparse layer)
  bool prequantized = false;  // read from a bitsandbytes 4-bit checkpoint
  LoadedWeights weights;      // when weights_dir was given
};

// Builds cfg's model under `init` (flat store; Category::Parameter) with its block linears in
// NF4. weights_dir "": values drawn as a plain build draws them (init.fill), else the directory's
// weights: floating ones quantised layer by layer, or a bitsandbytes NF4 checkpoint read as it is.
QuantizedModel build_nf4_model(const models::ModelConfig& cfg, nn::InitOptions init, const std::string& weights_dir);

}  // namespace lt
