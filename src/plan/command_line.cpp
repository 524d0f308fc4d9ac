// command_line: the `leantrain train` flags that reproduce a config, so the budget search can
// print the run it chose and an OOM can suggest the plan to run. --model (or --config) is always
// written, so the command names its model and can be pasted as is; every other flag only where
// it differs from the default.
#include <charconv>
#include <cstdint>
#include <string>

#include "leantrain/plan.h"

namespace lt {

namespace {

// The shortest text that reads back as exactly v (0.1, 3e-04, 1e+300): a pasted command reruns the same config.
std::string num(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, end);
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
  // Integers in full: through a double, --seed 12345678901234567 or --steps 1234567 would print rounded.
  auto i = [&](const char* flag, auto v, decltype(v) dv) {
    if (v != dv) s += std::string(" ") + flag + " " + std::to_string(v);
  };
  if (c.model_config.empty()) s += " --model " + quoted(c.model);  // even when it is the default
  else s += " --config " + quoted(c.model_config);
  str("--data", c.data, d.data);
  i("--seq-len", c.seq_len, d.seq_len);
  i("--dim", c.dim, int64_t(0));
  i("--depth", c.depth, int64_t(0));
  i("--heads", c.heads, int64_t(0));
  i("--patch", c.patch, int64_t(0));
  i("--mlp-dim", c.mlp_dim, int64_t(0));
  i("--batch", c.batch, d.batch);
  i("--micro-batch", c.micro_batch, d.micro_batch);
  i("--steps", c.steps, d.steps);
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
  i("--warmup", c.warmup, d.warmup);
  n("--min-lr-ratio", c.min_lr_ratio, d.min_lr_ratio);
  n("--clip", c.clip, d.clip);
  i("--seed", c.seed, d.seed);
  str("--precision", c.precision, d.precision);
  str("--master-weights", c.master_weights, d.master_weights);
  if (c.stochastic_rounding) s += " --stochastic-rounding";
  if (c.fused_step) s += " --fused-step";
  if (!c.lean_saves) s += " --no-lean-saves";
  str("--checkpoint", c.checkpoint, d.checkpoint);
  if (c.offload_activations) s += " --offload-activations";
  str("--quantize", c.quantize, d.quantize);
  i("--lora-rank", c.lora_rank, d.lora_rank);
  if (c.lora_rank > 0) n("--lora-alpha", c.lora_alpha, d.lora_alpha);
  n("--lora-dropout", c.lora_dropout, d.lora_dropout);
  str("--lora-targets", c.lora_targets, d.lora_targets);
  str("--lora-init", c.lora_init, d.lora_init);
  str("--offload", c.offload, d.offload);
  i("--devices", c.devices, d.devices);
  if (c.gemm_workspace != d.gemm_workspace) s += " --gemm-workspace " + std::to_string(c.gemm_workspace);
  if (c.devices > 1) {  // one process: no strategy to name
    str("--strategy", c.strategy, d.strategy);
    if (c.strategy == "fsdp" && !c.reshard_after_forward) s += " --reshard-after-forward false";
  }
  i("--loss-chunk", c.loss_chunk, d.loss_chunk);
  i("--eval-every", c.eval_every, d.eval_every);
  i("--eval-batches", c.eval_batches, d.eval_batches);
  str("--save", c.save, d.save);
  if (c.save_sharded) s += " --save-sharded";
  str("--device", c.device, d.device);
  str("--metrics", c.metrics, d.metrics);
  return s;
}

}  // namespace lt
