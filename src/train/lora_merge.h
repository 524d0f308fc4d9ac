// `leantrain merge`: a base model directory plus a PEFT LoRA adapter -> a Hugging Face model
// directory whose linear weights are W + (alpha / r) B A, in the base's dtype and layout.
#pragma once
#include <cstdint>
#include <string>

namespace lt {

struct MergeConfig {
  std::string model;    // the base: a Hugging Face model directory or a leantrain checkpoint with weights
  std::string adapter;  // a PEFT LoRA adapter directory
  std::string out;      // where the merged model goes (the rules of --save)
  int64_t shard_bytes = 5'000'000'000;
};

struct MergeResult {
  std::string description;  // one line for the log
};

MergeResult merge_adapter(const MergeConfig& c);

}  // namespace lt
