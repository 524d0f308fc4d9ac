#include "train/assemble.h"

#include "train/techniques.h"

namespace lt {

AssembledRun assemble_run(const RunConfig& cfg, Device device, const AssembleOptions& o) {
  AssembledRun r;
  r.task = make_task(cfg, device);
  const std::vector<Technique>& list = techniques();
  for (const Technique& t : list)
    if (t.on_model && t.applies(cfg, o)) t.on_model(r, cfg);
  r.trainer = std::make_unique<Trainer>(cfg, *r.task);
  for (const Technique& t : list)
    if (t.on_trainer && t.applies(cfg, o)) t.on_trainer(r, cfg);
  return r;
}

}  // namespace lt
