// trainer_state.json of a checkpoint directory on arbitrary text: what --resume reads before
// building anything (read_checkpoint_config: the format and position checks, then the stored
// run config through config_from_json) and what generate reads (the tokenizer name).
#include "fuzz_input.h"
#include "train/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  lt::fuzz::write_input("checkpoint/trainer_state.json", data, size);
  const std::string dir = (lt::fuzz::scratch_dir() / "checkpoint").string();
  lt::fuzz::rejects_only_with_error([&] { lt::read_checkpoint_config(dir); });
  lt::fuzz::rejects_only_with_error([&] { lt::read_tokenizer_name(dir); });
  return 0;
}
