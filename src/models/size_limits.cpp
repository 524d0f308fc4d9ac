#include "models/size_limits.h"

#include "io/text_format.h"
#include "leantrain/error.h"

namespace lt::models {

void check_model_size(const std::string& model, const ModelSize& size, const std::string& layers_key,
                      const std::string& fields) {
  const std::string params = short_number(size.parameters, 3) + " parameters";
  LT_CHECK(size.layers <= kMaxLayers,
           model + " model has " + std::to_string(size.layers) + " layers (" + layers_key + ") and " + params,
           "leantrain builds at most " + std::to_string(kMaxLayers) + " layers", "use fewer layers");
  LT_CHECK(size.parameters <= kMaxParameters,
           model + " model has " + params + " = " + short_number(4 * size.parameters, 3) + " bytes in f32",
           "that is over 2^48 parameters (1 PiB in f32), more than any machine holds",
           "use smaller " + fields);
}

void check_class_count(const std::string& model, int64_t num_labels) {
  LT_CHECK(num_labels <= kMaxClasses, model + " config: num_labels = " + std::to_string(num_labels),
           "leantrain's classifiers have at most " + std::to_string(kMaxClasses) + " classes (2^20)",
           "use fewer classes");
}

}  // namespace lt::models
