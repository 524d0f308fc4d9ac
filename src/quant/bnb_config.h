// The `quantization_config` of a Hugging Face config.json saved from a bitsandbytes 4-bit model
// (transformers' BitsAndBytesConfig.to_dict()): which of its settings leantrain can load.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "leantrain/dtype.h"

namespace lt {

struct BnbQuantConfig {
  DType compute_dtype = DType::F32;        // bnb_4bit_compute_dtype (transformers' default float32)
  std::vector<std::string> skip_modules;   // llm_int8_skip_modules: modules left unquantised
};

// `qc` is config.json's "quantization_config" object; `source` names the file in messages.
// Accepts quant_method "bitsandbytes" with load_in_4bit, bnb_4bit_quant_type "nf4",
// bnb_4bit_use_double_quant true and uint8 storage; refuses everything else with one line.
BnbQuantConfig parse_bnb_quant_config(const nlohmann::json& qc, const std::string& source);

}  // namespace lt
