// command_line: the `leantrain train` flags that reproduce a config, so the budget search can
// print the run it chose and an OOM can suggest the plan to run. --model (or --config) is always
// written, so the command names its model and can be pasted as is; every other flag only where
// it differs from the default.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "leantrain/plan.h"

namespace lt {

namespace {

// As the flag parser reads it back: integers in full ("1000000000", never "1e+09", which an
// integer flag refuses), other values in the fewest digits that give the same double.
std::string num(double v) {
  if (v == std::floor(v) && std::fabs(v) < 9.2e18) return std::to_string(int64_t(v));
  char buf[40];
  for (int digits = 6; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::string quoted(const std::string& s) {
  if (!s.empty() && s.find_first_of(" '\"$\\*?|&;<>()") == std::string::npos) return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace

std::string command_line(const RunConfig& c) {
  const RunConfig d;
  std::string s = "leantrain train";
  auto str = [&](const char* flag, const std::string& v, const std::string& dv) {
    if (v != dv) s += std::string(" ") + flag + " " + quoted(v);
  };
  auto n = [&](const char* flag, double v, double dv) {
    if (v != dv) s += std::string(" ") + flag + " " + num(v);
  };
  if (c.model_config.empty()) s += " --model " + quoted(c.model);  // even when it is the default
  else s += " --config " + quoted(c.model_config);
  str("--data", c.data, d.data);
  n("--seq-len", double(c.seq_len), double(d.seq_len));
  n("--dim", double(c.dim), 0);
  n("--depth", double(c.depth), 0);
  n("--heads", double(c.heads), 0);
  n("--patch", double(c.patch), 0);
  n("--mlp-dim", double(c.mlp_dim), 0);
  n("--batch", double(c.batch), double(d.batch));
  n("--micro-batch", double(c.micro_batch), double(d.micro_batch));
  n("--steps", double(c.steps), double(d.steps));
  n("--epochs", c.epochs, d.epochs);
  str("--optimizer", c.optimizer, d.optimizer);
  str("--state-dtype", c.state_dtype, d.state_dtype);
  n("--lr", c.lr, d.lr);
  n("--momentum", c.momentum, d.momentum);
  if (c.nesterov) s += " --nesterov";
  n("--dampening", c.dampening, d.dampening);
  n("--weight-decay", c.weight_decay, d.weight_decay);
  n("--beta1", c.beta1, d.beta1);
  n("--beta2", c.beta2, d.beta2);
  n("--eps", c.eps, d.eps);
  str("--schedule", c.schedule, d.schedule);
  n("--warmup", double(c.warmup), double(d.warmup));
  n("--min-lr-ratio", c.min_lr_ratio, d.min_lr_ratio);
  n("--clip", c.clip, d.clip);
  if (c.seed != d.seed) s += " --seed " + std::to_string(c.seed);  // a 64-bit seed does not fit a double
  str("--precision", c.precision, d.precision);
  str("--master-weights", c.master_weights, d.master_weights);
  if (c.stochastic_rounding) s += " --stochastic-rounding";
  if (c.fused_step) s += " --fused-step";
  str("--checkpoint", c.checkpoint, d.checkpoint);
  n("--eval-every", double(c.eval_every), double(d.eval_every));
  n("--eval-batches", double(c.eval_batches), double(d.eval_batches));
  str("--save", c.save, d.save);
  str("--device", c.device, d.device);
  str("--metrics", c.metrics, d.metrics);
  return s;
}

}  // namespace lt
