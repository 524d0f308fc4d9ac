// `leantrain eval`: logits and loss of a model directory on inputs from a safetensors file
// (train/eval_inputs.h), for comparing with another implementation.
#include "cli/cli.h"
#include "train/eval_inputs.h"
#include "train/output_paths.h"

namespace lt::cli {

void add_eval_flags(CLI::App& cmd, EvalConfig& c) {
  cmd.footer("Example: leantrain eval --model runs/gpt --inputs batch.safetensors --out logits.safetensors");
  cmd.add_option("--model", c.model, "A model directory (config.json + weights) or a preset (random weights)")->required();
  cmd.add_option("--adapter", c.adapter, "A PEFT LoRA adapter directory (a LoRA run's --save) applied on the model");
  cmd.add_option("--inputs", c.inputs,
                 "safetensors file: input_ids (language models) or pixel_values (image models), optional labels")
      ->required();
  cmd.add_option("--out", c.out, "Write logits (F32) and loss to this safetensors file");
  cmd.add_option("--dtype", c.dtype, "The parameters' dtype: f32, bf16 or f16")->capture_default_str();
  cmd.add_option("--device", c.device, "cpu, cuda, cuda:N or auto")->capture_default_str();
  add_seed_flag(cmd, c.seed, "Seed of a preset's random weights")->capture_default_str();
}

int run_eval(const EvalConfig& cfg) {
  if (!cfg.out.empty()) check_output_file("--out", cfg.out, false);  // before the work, not after it
  const EvalResult r = eval_inputs(cfg);
  std::printf("%s\nlogits %s", r.description.c_str(), shape_str(r.logits).c_str());
  if (r.loss) std::printf(" | loss %.9g", *r.loss);
  if (!cfg.out.empty()) std::printf(" -> %s", cfg.out.c_str());
  std::printf("\n");
  return 0;
}

}  // namespace lt::cli
