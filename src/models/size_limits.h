// The up-front refusal of models no machine could hold. Every config's validate() computes its
// model's parameter count in closed form from the config (no module built, no memory taken)
// and passes it here, so `--depth 100000000` or an `n_inner` of 2^62 in a config.json is one
// error line at once instead of minutes of growth, a wrapped size or a crash.
#pragma once
#include <cstdint>
#include <string>

namespace lt::models {

// 2^48 parameters are 1 PiB in f32: more than any machine holds.
constexpr double kMaxParameters = 281474976710656.0;  // 2^48
// Ten times the depth of the deepest transformers trained; each layer is a few modules, so the
// module tree stays small even on meta.
constexpr int64_t kMaxLayers = 10000;
// A classifier's classes: 2^20 is fifty times ImageNet-21k's. Per-class work on the host
// (class names, metrics) stays small, and a crafted num_labels of 10^11 is refused at once.
constexpr int64_t kMaxClasses = int64_t(1) << 20;

// What the closed form says about a config. Parameters are counted in double: exact below 2^53,
// so exact for every model that passes the limit, and never an overflow for one that does not.
struct ModelSize {
  double parameters = 0;
  int64_t layers = 0;
};

// Throws lt::Error naming the figure when `size` is over a limit. `model`: "GPT-2"; `layers_key`:
// the config field that counts layers ("n_layer"); `fields`: the fields that set the size, for the
// fix ("n_embd, n_layer or vocab_size").
void check_model_size(const std::string& model, const ModelSize& size, const std::string& layers_key,
                      const std::string& fields);

// Throws lt::Error naming the figure when a classifier's num_labels is over kMaxClasses.
// `model`: "ViT".
void check_class_count(const std::string& model, int64_t num_labels);

}  // namespace lt::models
