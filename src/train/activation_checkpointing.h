// --checkpoint for a run: installs activation checkpointing on the built model (leantrain/
// checkpoint.h does the work), --offload-activations on top, and says what it selected. Used by
// `train`, and by `plan` for its dry run on meta, so both see the same modules recomputed.
#pragma once
#include <string>

#include "leantrain/models.h"
#include "leantrain/train.h"

namespace lt {

// Throws UsageError when the spec selects nothing or something that cannot be recomputed.
// Returns a line for the log ("" for none). offload: --offload-activations (train/activation_offload.h)
// on the selected modules.
std::string apply_activation_checkpointing(models::Model& model, const std::string& spec, bool offload = false);

}  // namespace lt
