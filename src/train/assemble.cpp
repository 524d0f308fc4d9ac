#include "train/assemble.h"

#include "dist/data_parallel.h"
#include "train/activation_checkpointing.h"

namespace lt {

AssembledRun assemble_run(const RunConfig& cfg, Device device, const AssembleOptions& o) {
  AssembledRun r;
  r.task = make_task(cfg, device);
  if (o.checkpointing)
    r.checkpointing = apply_activation_checkpointing(*r.task->model, cfg.checkpoint,
                                                     cfg.offload_activations && cfg.checkpoint != "none");
  r.trainer = std::make_unique<Trainer>(cfg, *r.task);
  if (o.strategy) dist::install_strategy(*r.trainer);  // ddp / zero1 / zero2 / fsdp when the world has 2+ ranks
  return r;
}

}  // namespace lt
