// The precision policy table and the loss scaler. The scaler's arithmetic is torch.amp's
// (_amp_update_scale): back off on inf/NaN and reset the run of clean steps; grow after
// growth_interval clean steps, unless growing would leave the f32 range.
#include "leantrain/precision.h"

#include <cfloat>
#include <cmath>
#include <nlohmann/json.hpp>

#include "leantrain/error.h"

namespace lt {

std::vector<std::string> precision_names() {
  return {ChoiceNames<Precision>::names.begin(), ChoiceNames<Precision>::names.end()};
}

PrecisionPolicy precision_policy(Precision k) {
  PrecisionPolicy p;
  p.name = name_of(k);
  switch (k) {
    case Precision::True32: break;
    case Precision::Mixed16: p.compute_dtype = DType::F16, p.loss_scaling = true; break;
    case Precision::MixedBf16: p.compute_dtype = DType::BF16; break;
    case Precision::True16: p.param_dtype = DType::F16; break;
    case Precision::TrueBf16: p.param_dtype = DType::BF16; break;
  }
  return p;
}

PrecisionPolicy precision_policy(const std::string& name) {
  if (std::optional<Precision> k = choice_named<Precision>(name)) return precision_policy(*k);
  fail("unknown precision '" + name + "'", "the policies are " + choice_list<Precision>(),
       "pass e.g. --precision bf16-mixed");
}

GradScaler::GradScaler(const GradScalerOptions& o) : opt_(o), scale_(o.init_scale) {
  LT_CHECK(o.init_scale > 0 && std::isfinite(o.init_scale) && o.growth_factor > 1 && o.backoff_factor > 0 &&
               o.backoff_factor < 1 && o.growth_interval > 0,
           "grad scaler: bad options", "the scale must be positive and finite, growth > 1, 0 < backoff < 1, interval > 0",
           "use the defaults (65536, 2, 0.5, 2000)");
}

void GradScaler::update(bool found_inf) {
  ++steps_;
  if (found_inf) {
    ++skipped_;
    scale_ *= opt_.backoff_factor;
    growth_tracker_ = 0;
    return;
  }
  if (++growth_tracker_ < opt_.growth_interval) return;
  growth_tracker_ = 0;
  if (scale_ * opt_.growth_factor <= double(FLT_MAX)) scale_ *= opt_.growth_factor;
}

std::string GradScaler::state_json() const {
  nlohmann::json j{{"scale", scale_}, {"growth_tracker", growth_tracker_}, {"steps", steps_}, {"skipped", skipped_}};
  return j.dump();
}

void GradScaler::load_state_json(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
    double s = j.at("scale").get<double>();
    LT_CHECK(s > 0 && std::isfinite(s), "loss scaler state: scale " + std::to_string(s), "it must be positive",
             "save the checkpoint again");
    scale_ = s;
    growth_tracker_ = j.at("growth_tracker").get<int64_t>();
    steps_ = j.value("steps", int64_t(0));
    skipped_ = j.value("skipped", int64_t(0));
  } catch (const nlohmann::json::exception& e) {
    fail("loss scaler state is damaged", e.what(), "save the checkpoint again");
  }
}

}  // namespace lt
