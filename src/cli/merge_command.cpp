// `leantrain merge`: fold a LoRA adapter into its base model (train/lora_merge.h).
#include "cli/cli.h"
#include "leantrain/plan.h"
#include "train/lora_merge.h"

namespace lt::cli {

void add_merge_flags(CLI::App& cmd, MergeConfig& c) {
  cmd.footer("Example: leantrain merge --model models/tinyllama --adapter runs/lora --out models/tinyllama-merged");
  cmd.add_option("--model", c.model, "The base model directory (config.json + weights) the adapter was trained on")
      ->required();
  cmd.add_option("--adapter", c.adapter, "A PEFT LoRA adapter directory (adapter_config.json + adapter_model.safetensors)")
      ->required();
  cmd.add_option("--out", c.out, "The merged model's directory (new, empty, or a leantrain checkpoint)")->required();
  cmd.add_option_function<std::string>(
         "--save-shard-size", [&c](const std::string& text) { c.shard_bytes = parse_bytes(text, "--save-shard-size"); },
         "Weights larger than this are written in shards (default 5GB)")
      ->type_name("SIZE");
}

int run_merge(const MergeConfig& c) {
  const MergeResult r = merge_adapter(c);
  std::printf("%s\n", r.description.c_str());
  return 0;
}

}  // namespace lt::cli
