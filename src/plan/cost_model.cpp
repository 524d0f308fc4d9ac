// The budget search's cost model, in one function so it can be checked against measured step
// times (docs/memory-model.md, "Fitting a budget"). A step's time is modelled as
//   precision_factor x (1 + recompute) x (1 + per-micro-batch overhead x micro-batches / batch)
// relative to the same product for the base config:
//  - precision: f32 GEMMs run at 1; bf16/f16 tensor cores at about 0.5 with autocast (-mixed,
//    casts and f32 norms remain) and 0.45 with the model in 16 bits (-true);
//  - recompute: checkpointing re-runs the selected forward during backward, i.e. one extra
//    forward (~1/3 of forward + backward) over the share of blocks selected (all: blocks,
//    half: every:2); selective recomputes only attention/elementwise parts (~0.1);
//  - accumulation: each micro-batch pays a fixed launch/optimizer-independent overhead worth
//    kMicroBatchOverhead samples of compute, so small micro-batches cost more per sample;
//  - the fused step moves the same optimizer FLOPs into backward: no change.
#include <cstdlib>

#include "leantrain/plan.h"

namespace lt {

namespace {

constexpr double kMicroBatchOverhead = 2.0;  // samples of compute a micro-batch costs in fixed overhead

double precision_factor(const std::string& p) {
  if (p == "32-true") return 1.0;
  if (p == "16-mixed" || p == "bf16-mixed") return 0.5;
  return 0.45;  // 16-true, bf16-true
}

double recompute_share(const std::string& spec) {
  if (spec.empty() || spec == "none") return 0.0;
  if (spec == "blocks") return 1.0 / 3.0;
  if (spec.rfind("every:", 0) == 0) {
    long k = std::strtol(spec.c_str() + 6, nullptr, 10);
    return k > 0 ? (1.0 / 3.0) / double(k) : 1.0 / 3.0;
  }
  if (spec == "selective") return 0.1;
  return 1.0 / 3.0;  // a regex: assume whole blocks
}

double step_time(const RunConfig& c) {
  const double mb = double(c.micro_batch ? c.micro_batch : c.batch);
  const double k = double(c.batch) / mb;
  return precision_factor(c.precision) * (1.0 + recompute_share(c.checkpoint)) *
         (1.0 + kMicroBatchOverhead * k / double(c.batch));
}

}  // namespace

double relative_step_cost(const RunConfig& c, const RunConfig& base) { return step_time(c) / step_time(base); }

}  // namespace lt
