// trainer_state.json, read with every field's type checked: a damaged file fails with one line
// naming the file and the field, never with a JSON library's exception. What it holds is written
// by save_checkpoint (train/checkpoint.cpp).
#pragma once
#include <cstdint>
#include <map>
#include <string>

namespace lt {

struct TrainerState {
  int64_t step = 0, epoch = 0, batch_index = 0;
  std::string model_type, tokenizer;
  std::string tokenizer_sha256;  // RunTokenizer::digest() of the files saved; "" for none (or an older save)
  std::map<std::string, uint64_t> dropout_offsets;  // by module path
  std::map<std::string, std::string> hooks;         // StepHook::state() by hook name
  std::string config;                               // the RunConfig as JSON text
};

// Reads DIR/trainer_state.json. Throws lt::Error "checkpoint file DIR/trainer_state.json is
// corrupt: <field> ..." on anything missing or of the wrong type.
TrainerState read_trainer_state(const std::string& dir);

// The error for a damaged checkpoint file: "checkpoint file DIR/FILE is corrupt: WHY".
[[noreturn]] void checkpoint_corrupt(const std::string& dir, const std::string& file, const std::string& why);

}  // namespace lt
