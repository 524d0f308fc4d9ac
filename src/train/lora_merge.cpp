#include "train/lora_merge.h"

#include <filesystem>

#include "leantrain/train.h"
#include "models/registry.h"
#include "train/atomic_dir.h"
#include "train/checkpoint.h"
#include "train/checkpoint_weights.h"
#include "train/finite_state.h"
#include "train/lora_setup.h"
#include "train/quantize_setup.h"
#include "train/run_tokenizer.h"

namespace lt {

MergeResult merge_adapter(const MergeConfig& c) {
  // The output is checked first: a merge that cannot be written is refused before any work.
  if (SaveTarget t = save_target(c.out); !t.ok()) throw UsageError("--out " + c.out, t.why, t.fix);
  // A leantrain checkpoint may be replaced by a save, but not the model or adapter being read.
  auto same = [](const std::string& a, const std::string& b) {
    std::error_code ec;
    return std::filesystem::weakly_canonical(a, ec) == std::filesystem::weakly_canonical(b, ec);
  };
  for (const auto& [flag, dir] : {std::pair{"--model", c.model}, std::pair{"--adapter", c.adapter}})
    if (same(c.out, dir))
      throw UsageError("--out " + c.out, std::string("it is the ") + flag + " directory, which the merge reads",
                       "pass a new directory for the merged model");
  std::error_code ec;
  if (models::family_of_preset(c.model) || !std::filesystem::is_directory(c.model, ec) || !has_model_weights(c.model))
    throw UsageError("--model " + c.model, "merge needs the base model's weights",
                     "pass a directory holding config.json and model.safetensors (the model the adapter was trained on)");
  io::read_peft_adapter_config(c.adapter);  // a missing or foreign adapter is named before the base is read
  // W + (alpha / r) B A needs W itself; an NF4 base holds only its 4-bit approximation.
  if (model_dir_quantization(c.model))
    throw UsageError("--model " + c.model + " is quantised to 4 bits (its config.json has a quantization_config)",
                     "merge needs the 16-bit base: folding the adapter into NF4 weights would lose it in rounding",
                     "pass the 16- or 32-bit model directory the quantised one was made from");
  const std::string config_text = read_model_config(c.model);
  std::unique_ptr<models::ModelConfig> mcfg;
  try {
    mcfg = models::config_from_json(config_text);
  } catch (const Error& e) {
    throw Error("--model " + c.model + ": config.json: " + e.what_part(), e.why(), e.fix());
  }
  const DType dtype = checkpoint_param_dtype(c.model);
  std::shared_ptr<models::Model> model;
  {
    MemoryCategoryScope p(Category::Parameter);
    model = mcfg->build(nn::InitOptions{.device = Device::cpu(), .dtype = dtype, .fill = false});
  }
  load_weights(c.model, *model);
  attach_peft_adapter(*model, c.adapter);
  // The finite-state rule of a save: NaN or infinite weights are never written.
  if (std::string bad = nonfinite_weight(*model); !bad.empty())
    fail("cannot merge " + c.adapter + " into " + c.model, bad + ", and a merged model must hold finite weights",
         "pass an adapter saved by a run that did not diverge (leantrain refuses to save one that did)");
  const size_t layers = lora_modules(*model).size();
  merge_lora(*model);
  if (std::string bad = nonfinite_weight(*model); !bad.empty())
    fail("cannot merge " + c.adapter + " into " + c.model, "the merged " + bad + ": W + (alpha / r) B A overflows " +
         dtype_name(dtype), "pass an adapter with smaller weights, or a base saved in a wider dtype");

  StagedDir stage(c.out, SavedKind::Model);
  save_model_weights(stage.dir(), *model, c.shard_bytes);
  write_text_file(stage.path("config.json"), config_text);
  for (const char* name : kTokenizerFiles) {  // the base's tokenizer goes with it, when it has one
    const std::filesystem::path src = std::filesystem::path(c.model) / name;
    if (std::filesystem::is_regular_file(src, ec)) write_text_file(stage.path(name), read_text_file(c.model, name));
  }
  stage.commit();
  return {"merged " + std::to_string(layers) + " LoRA layers of " + c.adapter + " into " + c.model + " (" +
          dtype_name(dtype) + ") -> " + c.out};
}

}  // namespace lt
