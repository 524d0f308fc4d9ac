// A checkpoint is a directory:
//   model.safetensors      weights under their Hugging Face names (readable by Python's safetensors)
//   config.json            the model's Hugging Face config
//   optimizer.safetensors  optimizer state ("<param>.exp_avg", ...)
//   trainer_state.json     step, data position, dropout RNG offsets, hook state, the run config
//   tokenizer.json         (runs with one) the run's tokenizer, with tokenizer_config.json and
//                          special_tokens_map.json when they were beside it (train/run_tokenizer.h)
// It is written into DIR.tmp and then swapped in with renames, so DIR is always either the old
// complete checkpoint or the new complete one, never a mix (see write_checkpoint).
#pragma once
#include <map>
#include <string>

#include "leantrain/models.h"
#include "leantrain/optim.h"
#include "leantrain/train.h"

namespace lt {

class Trainer;

// The run config stored in DIR (for --resume defaults). Throws lt::Error with the file at fault.
RunConfig read_checkpoint_config(const std::string& dir);

void save_checkpoint(const std::string& dir, Trainer& t);
// Restores weights, optimizer state, step, data position, RNG offsets and hook state.
void load_checkpoint(const std::string& dir, Trainer& t);
// Only the weights (for generate); returns the stored tokenizer name.
void load_weights(const std::string& dir, models::Model& m);
// The model's config.json text stored in DIR.
std::string read_model_config(const std::string& dir);
std::string read_tokenizer_name(const std::string& dir);

}  // namespace lt
