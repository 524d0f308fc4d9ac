#include "train/techniques.h"

#include "dist/data_parallel.h"
#include "train/activation_checkpointing.h"
#include "train/activation_offload.h"
#include "train/offload_hooks.h"
#include "train/param_offload.h"
#include "train/precision_hooks.h"

namespace lt {

namespace {

bool checkpointing(const RunConfig& c, const AssembleOptions& o) { return o.checkpointing && c.checkpoint.on(); }

void checkpoint_modules(AssembledRun& r, const RunConfig& c) {
  r.checkpointed = apply_activation_checkpointing(*r.task->model, c.checkpoint.text);
  if (r.checkpointed.empty()) return;
  r.checkpointing = checkpointing_line(c.checkpoint.text, r.checkpointed);
}

// --offload-activations: what the checkpointed modules keep goes to pinned host memory.
bool offloading_activations(const RunConfig& c, const AssembleOptions& o) {
  return checkpointing(c, o) && c.offload_activations;
}
void offload_activations(AssembledRun& r, const RunConfig&) {
  if (r.checkpointed.empty()) return;
  offload_checkpointed_modules(*r.task->model, r.checkpointed);
  r.checkpointing += "; their saved inputs offloaded to pinned host memory";
}

// --offload params: the blocks' weights rest in pinned host memory before the optimizer is built
// (its f32 master copies are made from them there).
bool offloading_params(const RunConfig& c, const AssembleOptions&) { return c.offload == OffloadKind::Params; }
void offload_params(AssembledRun& r, const RunConfig&) { offload_block_parameters(*r.task->model, r.task->device); }

bool always(const RunConfig&, const AssembleOptions&) { return true; }
// Loss scaling (16-mixed), the optimizer step inside backward (--fused-step): precision_hooks.h.
void precision(AssembledRun& r, const RunConfig&) { add_precision_hooks(*r.trainer); }

bool offloading_optimizer(const RunConfig& c, const AssembleOptions&) { return c.offload != OffloadKind::None; }
void drain_gradients(AssembledRun& r, const RunConfig&) { add_offload_hooks(*r.trainer); }

// ddp / zero1 / zero2 / fsdp, when the world has 2+ ranks (the strategy decides; one rank: nothing).
bool sharing(const RunConfig&, const AssembleOptions& o) { return o.strategy; }
void strategy(AssembledRun& r, const RunConfig&) { dist::install_strategy(*r.trainer); }

}  // namespace

const std::vector<Technique>& techniques() {
  static const std::vector<Technique> list = {
      {"activation checkpointing", checkpointing, checkpoint_modules},
      {"activation offload", offloading_activations, offload_activations},
      {"parameter offload", offloading_params, offload_params},
      {"precision hooks", always, nullptr, precision},
      {"optimizer offload", offloading_optimizer, nullptr, drain_gradients},
      {"data parallel strategy", sharing, nullptr, strategy},
  };
  return list;
}

}  // namespace lt
