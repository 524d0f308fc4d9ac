#include "train/activation_checkpointing.h"

#include "leantrain/checkpoint.h"
#include "train/activation_offload.h"

namespace lt {

std::string apply_activation_checkpointing(models::Model& model, const std::string& spec, bool offload) {
  std::vector<std::string> paths;
  try {
    paths = nn::apply_checkpointing(model, spec);
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw UsageError(e.what_part(), e.why(), e.fix());  // a flag value that does not fit the model
  }
  if (paths.empty()) return "";
  if (offload) offload_checkpointed_modules(model, paths);
  std::string line = "activation checkpointing (" + spec + "): " + std::to_string(paths.size()) + " modules recomputed in backward: ";
  const size_t shown = std::min<size_t>(paths.size(), 4);
  for (size_t i = 0; i < shown; ++i) line += (i ? ", " : "") + paths[i];
  if (shown < paths.size()) line += ", ...";
  if (offload) line += "; their saved inputs offloaded to pinned host memory";
  return line;
}

}  // namespace lt
