// The memory techniques that change a run after its task (model, data, adapters, quantisation) is
// built, as one list that assemble_run walks: each says when the run asks for it and what it does
// at the two points of an assembly — on the model, before the Trainer exists (checkpoint wrappers,
// activation offload, parameters moved to the host), and on the Trainer, once it exists (step
// hooks). Adding a technique: its own file, one entry here, its row in the recipe table
// (train/recipe_table.cpp) and its term in the cost model (docs/decisions.md, "One assembly, one
// technique list"). The plan runs the same list on meta, so it cannot miss a technique.
#pragma once
#include <string>
#include <vector>

#include "train/assemble.h"

namespace lt {

struct Technique {
  const char* name;
  bool (*applies)(const RunConfig&, const AssembleOptions&);
  void (*on_model)(AssembledRun&, const RunConfig&) = nullptr;    // before the Trainer is made
  void (*on_trainer)(AssembledRun&, const RunConfig&) = nullptr;  // after; usually adds step hooks
};

// In install order: a later entry may read what an earlier one left in the AssembledRun (the
// activation offload reads the checkpointed paths).
const std::vector<Technique>& techniques();

}  // namespace lt
