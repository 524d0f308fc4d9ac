// The model registry's config.json reader (models::config_from_json: "model_type" picks the
// family, whose reader checks fields and the size limit), as `--config` and a checkpoint's
// config.json go through it. Then, for an accepted config: its config.json re-reads to the same
// config, and a small one (few layers) builds on the meta device (shapes only, no memory) into
// exactly the closed-form parameter count that the size limit was checked against.
#include "fuzz_input.h"
#include "leantrain/models.h"
#include "models/registry.h"

namespace {
constexpr int64_t kMaxLayersBuilt = 4;       // keeps a build on meta to a few milliseconds
constexpr double kMaxParametersBuilt = 1e9;  // meta tensors cost nothing, but keep counts small
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  lt::fuzz::rejects_only_with_error([&] {
    const std::unique_ptr<lt::models::ModelConfig> cfg = lt::models::config_from_json(std::string(lt::fuzz::as_text(data, size)));
    const std::string json = cfg->to_json();
    std::unique_ptr<lt::models::ModelConfig> again;
    try {
      again = lt::models::config_from_json(json);
    } catch (const lt::Error& e) {
      lt::fuzz::require(false, "its own config.json re-reads (" + std::string(e.what()) + ")");
    }
    lt::fuzz::require(again->to_json() == json, "its config.json re-reads to the same config");
    (void)cfg->size_summary();
    const lt::models::ModelSize s = cfg->size();
    if (s.layers > kMaxLayersBuilt || s.parameters > kMaxParametersBuilt) return;
    lt::nn::InitOptions init;
    init.device = lt::Device::meta();
    const std::shared_ptr<lt::models::Model> model = cfg->build(init);
    lt::fuzz::require(double(model->num_parameters()) == s.parameters,
                      "the built model has the closed-form parameter count (" + std::to_string(model->num_parameters()) +
                          " built, " + std::to_string(s.parameters) + " closed form)");
  });
  return 0;
}
