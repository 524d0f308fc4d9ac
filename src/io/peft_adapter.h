// PEFT's LoRA adapter directory, as PeftModel.save_pretrained writes it and from_pretrained reads it:
//   adapter_config.json        LoraConfig's fields (peft_type "LORA", r, lora_alpha, target_modules, ...)
//   adapter_model.safetensors  "base_model.model.<module path>.lora_A.weight" [r, in] and ".lora_B.weight"
//                              [out, r] (no adapter name in the key), and the whole parameters of the
//                              modules_to_save ("base_model.model.<path>.weight"); for
//                              target_parameters (stacked MoE expert weights [E, d1, d2], PEFT's
//                              ParamWrapper) "<module>.lora_A.weight" [r E, d1] and ".lora_B.weight"
//                              [d2, r E], the first wrapped parameter's under "<module>.base_layer."
// This file knows the format only; which modules carry adapters is train/lora_setup.h's business.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace lt::io {

inline constexpr const char* kAdapterConfigFile = "adapter_config.json";
inline constexpr const char* kAdapterWeightsFile = "adapter_model.safetensors";
inline constexpr const char* kPeftKeyPrefix = "base_model.model.";

struct PeftAdapterConfig {
  int64_t r = 8;
  double lora_alpha = 8;
  double lora_dropout = 0;
  // PEFT's target_modules: a list of names, each matching a module whose path equals it or ends
  // with "." + it; or (target_regex) one regex that must match a whole path.
  std::vector<std::string> target_modules;
  std::optional<std::string> target_regex;
  std::vector<std::string> modules_to_save;  // empty: null
  // PEFT's target_parameters: parameter paths ("experts.gate_up_proj") by the same suffix rule.
  std::vector<std::string> target_parameters;  // empty: null
  bool fan_in_fan_out = false;               // Conv1D weights (GPT-2)
  std::string task_type;                     // "CAUSAL_LM", or "" for null
  std::string base_model_name_or_path;
};

// The JSON text PEFT writes for `c` (every LoraConfig field a loader looks at, with PEFT's defaults).
std::string peft_adapter_config_json(const PeftAdapterConfig& c);
// Reads DIR/adapter_config.json; lt::Error naming the file and field when it is missing, not
// JSON, not a LoRA adapter, or uses a LoRA variant leantrain does not implement (DoRA, rsLoRA,
// per-layer rank or alpha patterns, biases).
PeftAdapterConfig read_peft_adapter_config(const std::string& dir);

// Whether a module path is one of the config's targets, by PEFT's rule.
bool peft_targets(const PeftAdapterConfig& c, const std::string& path);
// Whether a parameter path is one of the config's target_parameters, by PEFT's suffix rule.
bool peft_targets_parameter(const PeftAdapterConfig& c, const std::string& path);

}  // namespace lt::io
