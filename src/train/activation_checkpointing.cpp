#include "train/activation_checkpointing.h"

#include "leantrain/checkpoint.h"

namespace lt {

std::vector<std::string> apply_activation_checkpointing(models::Model& model, const std::string& spec) {
  try {
    return nn::apply_checkpointing(model, spec);
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw UsageError(e.what_part(), e.why(), e.fix());  // a flag value that does not fit the model
  }
}

std::string checkpointing_line(const std::string& spec, const std::vector<std::string>& paths) {
  std::string line = "activation checkpointing (" + spec + "): " + std::to_string(paths.size()) + " modules recomputed in backward: ";
  const size_t shown = std::min<size_t>(paths.size(), 4);
  for (size_t i = 0; i < shown; ++i) line += (i ? ", " : "") + paths[i];
  if (shown < paths.size()) line += ", ...";
  return line;
}

}  // namespace lt
