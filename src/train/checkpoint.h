// A checkpoint is a directory:
//   model.safetensors      weights under their Hugging Face names (readable by Python's safetensors),
//                          or model-0000k-of-0000n.safetensors + model.safetensors.index.json when
//                          they exceed --save-shard-size (as transformers' save_pretrained writes)
//   config.json            the model's Hugging Face config (model_type, architectures)
//   optimizer.safetensors  optimizer state ("<param>.exp_avg", ...), or with --save-sharded one file per
//                          rank, optimizer-0000r-of-0000w.safetensors, and optimizer.index.json naming them
//   trainer_state.json     step, data position, dropout RNG offsets, hook state, the run config
//   tokenizer.json         (runs with one) the run's tokenizer, with tokenizer_config.json and
//                          special_tokens_map.json when they were beside it (train/run_tokenizer.h)
//   dpo_reference.safetensors  (--objective dpo, a full fine-tune) the reference log-probabilities
//                          of every pair, "train" and "validation" F32 [pairs, 2] (train/dpo.h)
// It is written into DIR.tmp and then swapped in with renames, so DIR is always either the old
// complete checkpoint or the new complete one, never a mix (see write_checkpoint).
#pragma once
#include <map>
#include <string>

#include "leantrain/models.h"
#include "leantrain/optim.h"
#include "leantrain/train.h"

namespace lt {

// The manifest of a --save-sharded checkpoint's optimizer-state files.
inline constexpr const char* kStateIndexFile = "optimizer.index.json";

class Trainer;

// The run config stored in DIR (for --resume defaults). Throws lt::Error with the file at fault.
RunConfig read_checkpoint_config(const std::string& dir);

void save_checkpoint(const std::string& dir, Trainer& t);
// Restores weights, optimizer state, step, data position, RNG offsets and hook state.
void load_checkpoint(const std::string& dir, Trainer& t);
// Only the weights (for generate), from a leantrain checkpoint or a plain model directory.
void load_weights(const std::string& dir, models::Model& m);
// Whether DIR is a plain model directory: weights and (presumably) config.json but no
// trainer_state.json, as transformers' save_pretrained writes it. lt::Error when DIR is missing.
bool is_plain_model_dir(const std::string& dir);
// The dtype to build a checkpoint's model in for inference: the run's precision for a leantrain
// checkpoint, the weights' own (when they share F32, BF16 or F16; else F32) for a model directory.
DType checkpoint_param_dtype(const std::string& dir);
// The model's config.json text stored in DIR.
std::string read_model_config(const std::string& dir);
std::string read_tokenizer_name(const std::string& dir);

}  // namespace lt
