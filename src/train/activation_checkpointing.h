// --checkpoint for a run: installs activation checkpointing on the built model (leantrain/
// checkpoint.h does the work) and says what it selected. assemble_run calls it (through
// train/techniques.cpp) for `train` and for `plan`'s dry run on meta alike, so both see the same
// modules recomputed; --offload-activations then works on the paths it returns.
#pragma once
#include <string>
#include <vector>

#include "leantrain/models.h"
#include "leantrain/train.h"

namespace lt {

// The checkpointed module paths (empty for none). Throws UsageError when the spec selects
// nothing or something that cannot be recomputed.
std::vector<std::string> apply_activation_checkpointing(models::Model& model, const std::string& spec);
// "activation checkpointing (blocks): 12 modules recomputed in backward: transformer.h.0, ..."
std::string checkpointing_line(const std::string& spec, const std::vector<std::string>& paths);

}  // namespace lt
