// LoRA on a built model (leantrain/nn_lora.h): which linear layers get adapters (--lora-targets,
// or every linear layer inside the blocks), installing them with everything else frozen, and the
// adapters as a PEFT adapter directory (io/peft_adapter.h): written by --save, read by --resume,
// --lora-init, `leantrain eval --adapter` and `leantrain merge`.
#pragma once
#include <string>
#include <vector>

#include "io/peft_adapter.h"
#include "leantrain/models.h"
#include "leantrain/nn_lora.h"
#include "leantrain/nn_moe.h"
#include "leantrain/train.h"

namespace lt {

// Every linear layer inside an entry of a module list (the blocks), in model order: LLaMA's
// q|k|v|o|gate|up|down_proj, GPT-2's c_attn|c_proj|c_fc|c_proj, the ViT's out_proj|mlp.0|mlp.3.
std::vector<std::string> default_lora_targets(nn::Module& m);

// The modules trained whole beside the adapters (PEFT's modules_to_save): an image classifier's
// head, which a fine-tune to new classes must learn. Empty for language models.
std::vector<std::string> lora_modules_to_save(models::Model& m);

// Wraps the modules at `paths` in LoraLinear (adapters on the model's device, in `dtype`, drawn
// from `seed`) and freezes every other parameter but those of modules_to_save.
// lt::Error naming the module when one is not a replaceable linear layer or too narrow for the rank.
// expert_paths: MoE experts modules (nn::MoeExperts) that get adapters on gate_up_proj and
// down_proj (PEFT's target_parameters), made by the same factory.
void install_lora(models::Model& m, const std::vector<std::string>& paths, const nn::LoraOptions& o, uint64_t seed,
                  DType dtype, const std::vector<std::string>& expert_paths = {});

// The run's --lora-* flags on its model (nothing when --lora-rank is 0). UsageError when
// --lora-targets is not a regex, matches nothing or matches a module that is not a linear layer.
// Returns the line the run prints ("" when off).
std::string apply_lora(models::Model& m, const RunConfig& c);

// Installed adapters, by module path.
std::vector<std::pair<std::string, nn::LoraLinear*>> lora_modules(nn::Module& m);
// The MoE experts modules of m, and those that carry adapters.
std::vector<std::pair<std::string, nn::MoeExperts*>> moe_experts(nn::Module& m);
std::vector<std::pair<std::string, nn::MoeExperts*>> lora_experts(nn::Module& m);

// The adapter directory's files for m's adapters: adapter_config.json and adapter_model.safetensors.
void write_lora_adapter(const std::string& dir, models::Model& m, const std::string& base_model);
// Copies DIR's adapter_model.safetensors into m's installed adapters (and modules_to_save); every
// adapter must be there, with its shape. `context` starts the error lines ("--resume DIR").
void load_lora_adapter(const std::string& dir, models::Model& m);
// Installs the adapter of DIR on m as its adapter_config.json says, then loads its values.
void attach_peft_adapter(models::Model& m, const std::string& dir);
// Folds every adapter into its base weight (W + alpha/r B A) and puts the bases back in place.
void merge_lora(models::Model& m);

}  // namespace lt
