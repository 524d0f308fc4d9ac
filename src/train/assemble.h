// assemble_run: the one place a run is put together from its configuration and a device:
// the task (model, data, quantization, adapters), activation checkpointing (and activation
// offload on the checkpointed modules), the Trainer with its technique hooks (precision,
// offload, fused step), and the multi-rank strategy. `train`, `plan` (on meta), `profile` and the
// checkpoint-unit search all call it, so a plan replays the run's own assembly, not a copy of it
// (issue 43). Only the device differs between a run and its dry run.
#pragma once
#include <memory>
#include <string>

#include "train/task.h"
#include "train/trainer.h"

namespace lt {

struct AssembleOptions {
  bool checkpointing = true;  // off: the checkpoint-unit search probes the bare model
  bool strategy = true;       // off: one rank's step alone (profile)
};

struct AssembledRun {
  std::unique_ptr<Task> task;
  std::unique_ptr<Trainer> trainer;  // declared after the task: destroyed first, as it refers to it
  std::string checkpointing;         // what --checkpoint selected, a line for the log ("" for none)
};

AssembledRun assemble_run(const RunConfig& cfg, Device device, const AssembleOptions& o = {});

}  // namespace lt
