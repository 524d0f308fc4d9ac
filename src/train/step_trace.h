// LEANTRAIN_STEP_TRACE=1: where a step's time goes, for measuring (bench/ddp_tuning.sh). At each
// phase boundary the device is synchronised and the host clock read, so phases do not overlap
// (the figures are of a slower, serialised step); every 10 steps the means since the second step
// go to stderr as one line. Off: one branch per mark.
#pragma once
#include <array>
#include <chrono>
#include <cstdio>

#include "backend/backend.h"
#include "core/knobs.h"

namespace lt {

class StepTrace {
 public:
  enum Phase { Forward, Backward, Reduce, Norm, Optimizer, After, kPhases };
  explicit StepTrace(Device d) : device_(d), on_(knob_on("LEANTRAIN_STEP_TRACE")) {}
  void begin() {
    if (on_) t_ = now();
  }
  void mark(Phase p) {
    if (!on_) return;
    const double t = now();
    step_[p] += t - t_;
    t_ = t;
  }
  void end_step(int64_t step) {
    if (!on_) return;
    if (step > 1) {  // the first step allocates and warms up
      for (int p = 0; p < kPhases; ++p) sum_[p] += step_[p];
      ++n_;
    }
    step_ = {};
    if (n_ > 0 && step % 10 == 0) {
      double total = 0;
      for (double s : sum_) total += s;
      std::fprintf(stderr, "step trace (ms, mean of %d steps): forward %.2f | backward %.2f | reductions %.2f | norm %.2f | optimizer %.2f | after %.2f | total %.2f\n",
                   n_, ms(Forward), ms(Backward), ms(Reduce), ms(Norm), ms(Optimizer), ms(After), 1e3 * total / n_);
    }
  }

 private:
  double now() {
    backend_for(device_).synchronize();
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
  double ms(Phase p) const { return 1e3 * sum_[p] / n_; }
  Device device_;
  bool on_;
  double t_ = 0;
  std::array<double, kPhases> step_{}, sum_{};
  int n_ = 0;
};

}  // namespace lt
