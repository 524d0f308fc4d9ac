// `leantrain eval`: a model's logits (and loss) on inputs given in a safetensors file, written to
// another: what a comparison with another implementation needs (bench/peers/hf_roundtrip.py
// compares them with transformers'). The model is a model directory (config.json + weights,
// loaded) or a preset (random weights from --seed).
//   inputs: "input_ids" (I64/I32 [B, T]) for a language model, "pixel_values" (floating
//           [B, C, H, W]) for an image model; optional "labels" (I64): [B, T] for a language
//           model, shifted inside as transformers does (logits at t predict labels at t + 1;
//           default: input_ids), [B] for an image model (no loss without them).
//   output: "logits" (F32 [B, T, V] or [B, classes]) and, when there is one, "loss" (F32, the
//           mean cross-entropy, -100 labels ignored).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "leantrain/shape.h"

namespace lt {

struct EvalConfig {
  std::string model;   // a model directory or a preset
  std::string adapter; // a PEFT LoRA adapter directory applied on the model ("" = none)
  std::string inputs;  // safetensors file
  std::string out;     // safetensors file to write ("" = none)
  std::string dtype = "f32";  // the parameters': f32, bf16 or f16
  std::string device = "auto";
  uint64_t seed = 0;  // presets only
};

struct EvalResult {
  std::string description;  // "model DIR: GPT-2, 0.86M parameters, weights from DIR (52 tensors)"
  Shape logits;
  std::optional<double> loss;
};

// Throws UsageError for bad flags, lt::Error for bad files (naming the tensor and what it should be).
EvalResult eval_inputs(const EvalConfig& cfg);

}  // namespace lt
