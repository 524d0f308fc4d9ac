// Learning-rate schedules as pure functions of the step index, so resuming at step k needs no
// replay: lr(k) is the rate of the k-th (0-based) optimizer step, as Hugging Face's LambdaLR
// schedules give it (warmup starts at 0; decay ends at min_lr at total_steps and stays there).
#include <algorithm>
#include <cmath>

#include "leantrain/error.h"
#include "leantrain/optim.h"

namespace lt {

LrScheduleKind parse_lr_schedule(const std::string& s) {
  std::string k = s;
  std::replace(k.begin(), k.end(), '_', '-');
  if (k == "constant") return LrScheduleKind::Constant;
  if (k == "warmup-constant" || k == "constant-with-warmup") return LrScheduleKind::WarmupConstant;
  if (k == "linear" || k == "warmup-linear") return LrScheduleKind::WarmupLinear;
  if (k == "cosine" || k == "warmup-cosine") return LrScheduleKind::WarmupCosine;
  fail("unknown learning-rate schedule '" + s + "'", "known: constant, warmup-constant, linear, cosine",
       "pick one of those");
}

const char* lr_schedule_name(LrScheduleKind k) {
  switch (k) {
    case LrScheduleKind::Constant: return "constant";
    case LrScheduleKind::WarmupConstant: return "warmup-constant";
    case LrScheduleKind::WarmupLinear: return "linear";
    case LrScheduleKind::WarmupCosine: return "cosine";
  }
  return "?";
}

double LrSchedule::at(int64_t step) const {
  if (kind == LrScheduleKind::Constant) return lr;
  if (step < warmup_steps) return lr * double(step) / double(std::max<int64_t>(1, warmup_steps));
  if (kind == LrScheduleKind::WarmupConstant) return lr;
  LT_CHECK(total_steps > 0, std::string("the ") + lr_schedule_name(kind) + " schedule needs the total step count",
           "it decays to min_lr at the last step", "set the number of training steps");
  double progress = double(step - warmup_steps) / double(std::max<int64_t>(1, total_steps - warmup_steps));
  progress = std::clamp(progress, 0.0, 1.0);
  double factor = kind == LrScheduleKind::WarmupLinear ? 1.0 - progress : 0.5 * (1.0 + std::cos(M_PI * progress));
  return min_lr + (lr - min_lr) * factor;
}

}  // namespace lt
