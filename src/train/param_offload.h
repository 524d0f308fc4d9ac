// --offload params (ZeRO-3 offload / FSDP cpu_offload, docs/decisions.md "--offload params"):
// the parameters of the checkpointed modules (the blocks) live in pinned host memory
// (Category::Parameter in the pinned-host account) and come to the device only while their
// block runs.
//
// At rest a block parameter is a CPU tensor over its pinned home: the same TensorImpl (so the
// optimizer's slot, autograd's leaf and the gradient hooks keep it), with its storage and device
// switched. Forward: the block's wrapper (outside the checkpointing one) makes the compute stream
// wait for the block's copy, switches its parameters to the device copies, starts the copy of the
// next block on the copy stream, runs, and switches back (the device copies are freed). Backward:
// a pre-hook on the block's region node does the same before the recomputation, prefetching the
// block before it (reverse order); a post-hook after the node switches back. Gradients are
// produced on the device and drained to the host by --offload optimizer's hooks; the update
// writes the new values into the homes. Parameters outside the blocks (embeddings, head, final
// norm) stay on the device.
//
// Every choice follows program order, never timing, so cpu (plain copies), meta (no copies) and
// cuda allocate alike and `leantrain plan` predicts the device and pinned-host peaks.
#pragma once
#include <string>
#include <vector>

#include "leantrain/nn.h"

namespace lt {

// Moves the parameters of the outermost modules that have a forward wrapper (the checkpointed
// ones, in the order named_modules lists them: their forward order) to pinned host memory of
// `device` and installs the wrappers and hooks above. Returns the module paths (none: nothing
// is checkpointed, and the caller refuses).
std::vector<std::string> offload_block_parameters(nn::Module& root, Device device);

}  // namespace lt
