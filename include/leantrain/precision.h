// Precision policies, named as Lightning names them (--precision), and the dynamic loss scaler
// that 16-mixed needs (torch.amp.GradScaler semantics).
//
//   32-true     everything f32
//   16-mixed    f32 parameters, gradients and optimizer state; matmuls in f16 under autocast;
//               the loss is scaled so small f16 gradients do not flush to zero
//   bf16-mixed  the same in bf16, which has f32's range: no loss scaling
//   16-true     the model is built in f16: parameters, activations, gradients and (by default)
//               optimizer state are 16-bit; no loss scaling, so overflow is the user's risk
//   bf16-true   the same in bf16
// With the -true policies, Optimizer::set_master_weights keeps an f32 copy of each parameter.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "leantrain/choices.h"
#include "leantrain/dtype.h"

namespace lt {

struct PrecisionPolicy {
  std::string name;                     // "bf16-mixed", ...
  DType param_dtype = DType::F32;       // the dtype the model is built in
  std::optional<DType> compute_dtype;   // the autocast dtype of the -mixed policies
  bool loss_scaling = false;            // 16-mixed only
  bool low_precision_params() const { return param_dtype != DType::F32; }
};

std::vector<std::string> precision_names();  // "32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true"
PrecisionPolicy precision_policy(Precision p);
// By name (a library caller's string); throws lt::Error naming the known policies for an unknown one.
PrecisionPolicy precision_policy(const std::string& name);

// Dynamic loss scaling. The loss is multiplied by scale() before backward, so the gradients carry
// that factor; the optimizer step removes it (grad_scale = 1/scale, with the clip coefficient).
// A step whose gradients hold an inf or NaN is skipped by the caller and halves the scale;
// growth_interval clean steps in a row double it.
struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

class GradScaler {
 public:
  explicit GradScaler(const GradScalerOptions& o = {});
  double scale() const { return scale_; }
  // Records one step: found_inf means it was skipped.
  void update(bool found_inf);
  int64_t growth_tracker() const { return growth_tracker_; }  // clean steps since the last change
  int64_t steps() const { return steps_; }                    // updates recorded
  int64_t skipped() const { return skipped_; }                // of which skipped for inf/NaN
  const GradScalerOptions& options() const { return opt_; }

  // The checkpointed state as JSON text, and back (throws lt::Error on a damaged text).
  std::string state_json() const;
  void load_state_json(const std::string& text);

 private:
  GradScalerOptions opt_;
  double scale_;
  int64_t growth_tracker_ = 0, steps_ = 0, skipped_ = 0;
};

}  // namespace lt
