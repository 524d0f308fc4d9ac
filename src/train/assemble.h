// assemble_run: the one place a run is put together from its configuration and a device:
// the task (model, data, quantization, adapters), then each memory technique of
// train/techniques.h on the model, the Trainer, and each technique's step hooks (precision,
// offload, fused step, the multi-rank strategy). `train`, `plan` (on meta), `profile` and the
// checkpoint-unit search all call it, so a plan replays the run's own assembly, not a copy of it
// (issue 43). Only the device differs between a run and its dry run.
#pragma once
#include <memory>
#include <string>
#include <vector>

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
  std::vector<std::string> checkpointed;  // the module paths --checkpoint selected
  std::string checkpointing;         // what --checkpoint selected, a line for the log ("" for none)
};

AssembledRun assemble_run(const RunConfig& cfg, Device device, const AssembleOptions& o = {});

}  // namespace lt
