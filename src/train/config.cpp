// RunConfig: validation (every message names the flag to change) and its JSON form, which a
// checkpoint stores so that --resume and `generate` know what was trained.
#include <cmath>
#include <cstdint>
#include <algorithm>
#include <filesystem>
#include <numeric>
#include <nlohmann/json.hpp>

#include "io/text_format.h"
#include "leantrain/checkpoint.h"
#include "leantrain/precision.h"
#include "leantrain/train.h"
#include "train/output_paths.h"
#include "train/flag_ranges.h"
#include "train/recipe_table.h"
#include "train/quantize_setup.h"

namespace lt {

namespace {

void check_finite(double v, const char* flag) {
  if (!std::isfinite(v)) usage(std::string(flag) + " " + short_number(v), "it must be a finite number", std::string("pass a finite ") + flag);
}

int64_t largest_divisor_at_most(int64_t n, int64_t cap) {
  for (int64_t d = std::min(n, cap); d > 1; --d)
    if (n % d == 0) return d;
  return 1;
}

// --precision, --master-weights and --fused-step, and the pairs that cannot combine.
void validate_precision(const RunConfig& c) {
  const std::string precision = name_of(c.precision);
  if (c.master_weights == MasterWeights::Fp32 && !precision_policy(c.precision).low_precision_params())
    usage("--master-weights fp32 with --precision " + precision, "its parameters are already f32",
          "drop --master-weights, or use --precision bf16-true or 16-true");
  if (c.stochastic_rounding && !precision_policy(c.precision).low_precision_params())
    usage("--stochastic-rounding with --precision " + precision,
          "it rounds updates into 16-bit parameters, and these parameters are f32",
          "drop --stochastic-rounding, or use --precision bf16-true or 16-true");
  if (c.stochastic_rounding && c.master_weights == MasterWeights::Fp32)
    usage("--stochastic-rounding with --master-weights fp32",
          "the f32 master copies already keep every update, so there is nothing to round stochastically",
          "drop one of them: master weights cost 4 bytes per parameter, stochastic rounding none");
  if (c.keep_casts && !precision_policy(c.precision).compute_dtype)
    usage("--keep-casts with --precision " + precision,
          "it keeps the 16-bit copies that a -mixed precision casts its f32 weights to, and this precision casts none",
          "use --precision bf16-mixed or 16-mixed, or drop --keep-casts");
  if (c.keep_casts && c.offload != OffloadKind::None)
    usage("--keep-casts with --offload " + name_of(c.offload), "the host optimizer writes the weights, not their copies",
          "drop --keep-casts");
  if (c.keep_casts && c.strategy == StrategyKind::Fsdp)
    usage("--keep-casts with --strategy fsdp", "fsdp gathers each block's 16-bit weights for every forward anyway",
          "drop --keep-casts, or use --strategy ddp, zero1 or zero2");
  if (!c.fused_step) return;
  int64_t mb = c.micro_batch ? c.micro_batch : c.batch;
  // With micro-batches the step runs breadth-first (Trainer::step): every micro-batch's forward
  // first, so only what checkpointed regions keep may stay alive across them.
  if (mb < c.batch && !c.checkpoint.on())
    usage("--fused-step with --micro-batch " + std::to_string(mb) + " < --batch " + std::to_string(c.batch) +
              " and no --checkpoint",
          "a fused step with micro-batches runs every micro-batch's forward before one backward over all of them, "
          "so without checkpointing it keeps the activations of the whole batch",
          "add --checkpoint blocks, or drop --micro-batch");
  if (mb < c.batch && c.offload_activations)
    usage("--fused-step with --micro-batch and --offload-activations",
          "the breadth-first backward visits every micro-batch at each depth, which the offload's prefetch order does "
          "not follow", "drop --offload-activations (the breadth-first step keeps no gradient buffer instead)");
  if (precision_policy(c.precision).loss_scaling)
    usage("--fused-step with --precision 16-mixed", "a step with an overflowed gradient must be skipped whole, but a "
          "fused step has updated the first parameters before the overflow shows",
          "use --precision bf16-mixed, which needs no loss scaling, or drop --fused-step");
}

// --strategy and --devices on their own; what depends on the world size is checked when the
// process joins it (src/dist/session.cpp).
void check_strategy(const RunConfig& c) {
  if (c.devices < 1 || c.devices > 1024)
    usage("--devices " + std::to_string(c.devices), "it counts the processes to start on this host",
          "pass --devices between 1 and 1024");
  if (c.save_sharded && c.strategy == StrategyKind::Ddp)
    usage("--save-sharded with --strategy ddp", "every ddp rank holds the whole optimizer state, which rank 0 saves whole",
          "drop --save-sharded, or shard the state with --strategy zero1, zero2 or fsdp");
  if (c.devices > 1 && c.fused_step)
    usage("--devices " + std::to_string(c.devices) + " with --fused-step", "a fused step updates parameters inside "
          "backward, before their gradients are reduced over the ranks", "drop --fused-step");
  if (c.devices > 1 && (c.batch % c.devices != 0 || (c.micro_batch && c.micro_batch % c.devices != 0)))
    usage("--devices " + std::to_string(c.devices) + " with --" + (c.batch % c.devices ? "batch " + std::to_string(c.batch)
                                                                                      : "micro-batch " + std::to_string(c.micro_batch)),
          "each rank trains on an equal share of every batch and micro-batch", "make it a multiple of --devices");
  if (c.strategy == StrategyKind::Ddp) return;
  if (c.fused_step)
    usage("--strategy " + name_of(c.strategy) + " with --fused-step", "a fused step updates parameters inside backward, before "
          "their gradients are reduced over the ranks", "drop --fused-step, or use --strategy ddp");
}

// --offload: what runs today (optimizer, with AdamW, Lion, SGD or their 8-bit states on the host), one line for the rest.
void check_offload(const RunConfig& c) {
  if (c.gemm_workspace < 0 || c.gemm_workspace > (int64_t(1) << 30))
    usage("--gemm-workspace " + std::to_string(c.gemm_workspace), "cuBLASLt's workspace is 0 to 1 GiB",
          "pass a size such as 32MiB, or 0 for none");
  // --offload-dir / --host-memory-limit: the disk tier of --offload optimizer's state.
  if (c.host_memory_limit >= 0 && c.offload_dir.empty())
    usage("--host-memory-limit without --offload-dir", "the state beyond the limit needs a place on disk",
          "add --offload-dir DIR, or drop --host-memory-limit");
  if (!c.offload_dir.empty()) {
    if (c.offload != OffloadKind::Optimizer)
      usage("--offload-dir with --offload " + name_of(c.offload),
            c.offload == OffloadKind::Params ? "parameters on disk are not built yet; the disk tier holds optimizer state"
                                  : "the disk tier holds --offload optimizer's state",
            "add --offload optimizer");
    if (is_eight_bit(c.optimizer))
      usage("--offload-dir with --optimizer " + name_of(c.optimizer),
            "the disk tier holds f32 state (AdamW, Lion, SGD); 8-bit state is small enough for host memory",
            "use --optimizer adamw, lion or sgd, or drop --offload-dir");
  }
  if (c.offload == OffloadKind::None) return;
  // params: the blocks' weights in host memory, fetched per block; the optimizer on the host too.
  if (c.offload == OffloadKind::Params && !c.checkpoint.on())
    usage("--offload params without --checkpoint",
          "the weights of a block come to the device for its forward and again for its recomputation, "
          "and only checkpointed blocks are recomputed",
          "add --checkpoint blocks");
  const std::string what = "--offload " + name_of(c.offload);
  if (c.stochastic_rounding)
    usage(what + " with --stochastic-rounding", "the host step rounds the 16-bit parameters to nearest",
          "drop --stochastic-rounding (the host keeps f32 master weights anyway)");
  if (c.master_weights == MasterWeights::Fp32)
    usage(what + " with --master-weights fp32", "the offloaded state already keeps f32 master weights",
          "drop --master-weights");
  if (c.state_dtype == StateDtype::Bf16)
    usage(what + " with --state-dtype bf16",
          "the offloaded state is f32 (or 8-bit with --optimizer adamw8bit / lion8bit)", "drop --state-dtype");
  if (c.fused_step)
    usage(what + " with --fused-step", "the two are not combined yet",
          "drop --fused-step (offload already keeps the state off the device)");
}

// --lora-*: the values alone; what --lora-targets matches is checked on the model (train/lora_setup.h).
void check_lora(const RunConfig& c) {
  if (c.lora_rank == 0) {
    if (!c.lora_targets.empty() || !c.lora_init.empty() || c.lora_dropout != 0)
      usage(!c.lora_targets.empty() ? "--lora-targets" : !c.lora_init.empty() ? "--lora-init" : "--lora-dropout",
            "it configures LoRA adapters, and --lora-rank is 0 (no adapters)", "add --lora-rank, e.g. --lora-rank 16");
    return;
  }
  check_finite(c.lora_alpha, "--lora-alpha");
  if (!(c.lora_alpha > 0)) usage("--lora-alpha " + short_number(c.lora_alpha), "it must be positive", "pass e.g. --lora-alpha 16");
  check_finite(c.lora_dropout, "--lora-dropout");
  if (!(c.lora_dropout >= 0 && c.lora_dropout < 1))
    usage("--lora-dropout " + short_number(c.lora_dropout), "it must be in [0, 1)", "pass e.g. --lora-dropout 0.05");
}

// --objective dpo and its parameters (ranges come from the recipe table); what the data hold is
// checked as they are read (train/dpo_data.h).
void check_objective(const RunConfig& c) {
  if (c.objective != Objective::Dpo) return;
  const std::string p = c.prompt_field, ch = c.chosen_field, r = c.rejected_field;
  if (p.empty() || ch.empty() || r.empty() || p == ch || p == r || ch == r)
    usage("--prompt-field '" + p + "' --chosen-field '" + ch + "' --rejected-field '" + r + "'",
          "they name three different .jsonl fields of a preference pair", "pass three different, non-empty field names");
  if (c.dpo_loss == DpoLoss::Ipo && c.label_smoothing != 0)
    usage("--label-smoothing " + short_number(c.label_smoothing) + " with --dpo-loss ipo",
          "IPO's squared loss has no label smoothing (TRL applies it to sigmoid-shaped losses only)",
          "drop --label-smoothing, or use --dpo-loss sigmoid");
}

}  // namespace

void validate(const RunConfig& c) {
  if (c.model.empty() && c.model_config.empty())
    usage("no model given", "--model is empty", "pass --model vit-tiny or --config config.json");
  // Each ranged value first, as the command line checks it while parsing (a config from a
  // checkpoint or the library API did not pass through the parser); then the combinations below,
  // which may divide by them.
  for (const RecipeField& f : recipe_fields()) {
    if (f.irange) {
      const int64_t v = c.*std::get<int64_t RunConfig::*>(f.member);
      if (!(f.zero_is_unset && v == 0)) check_range(*f.irange, v);
    }
    if (f.rrange) check_range(*f.rrange, c.*std::get<double RunConfig::*>(f.member));
  }
  if (c.memory_history && c.memory_snapshot.empty() && c.memory_report.empty())
    usage("--memory-history has nowhere to go", "the history is written by --memory-snapshot or --memory-report",
          "add --memory-report mem.html or --memory-snapshot mem.json");
  // Output files and --save: a path that cannot be written is found before the run, not after it.
  check_run_outputs(c);
  try {
    nn::parse_checkpoint_spec(c.checkpoint.text);  // the syntax; what it matches is checked on the model
  } catch (const Error& e) {
    usage(e.what_part(), e.why(), e.fix());
  }
  if (c.offload_activations && !c.checkpoint.on())
    usage("--offload-activations without --checkpoint",
          "it offloads what checkpointed modules keep for their recomputation, and none is checkpointed",
          "add --checkpoint blocks (or another --checkpoint value)");
  check_offload(c);
  check_lora(c);
  check_strategy(c);
  int64_t mb = c.micro_batch ? c.micro_batch : c.batch;
  if (c.batch % mb != 0)
    usage("--batch " + std::to_string(c.batch) + " is not divisible by --micro-batch " + std::to_string(mb),
          "a step accumulates a whole number of micro-batches",
          "pick a micro-batch that divides the batch, e.g. --micro-batch " +
              std::to_string(largest_divisor_at_most(c.batch, mb)));
  if (c.steps == 0 && c.epochs == 0)
    usage("--epochs 0", "nothing to train", "pass --epochs 1 (fractions such as 0.5 work), or --steps N");
  check_finite(c.lr, "--lr");
  // 0 is allowed: a run that keeps the weights as they are (e.g. a load/save round trip).
  if (c.lr < 0) usage("--lr " + short_number(c.lr), "the learning rate must not be negative", "pass e.g. --lr 1e-3");
  if (c.state_dtype != StateDtype::Auto && is_eight_bit(c.optimizer))
    usage("--state-dtype with --optimizer " + name_of(c.optimizer), "8-bit optimizers quantise their own state",
          "drop --state-dtype or pick adamw/lion/sgd");
  check_finite(c.momentum, "--momentum");
  if (c.momentum < 0 || c.momentum >= 1) usage("--momentum " + short_number(c.momentum), "it must be in [0, 1)", "pass e.g. --momentum 0.9");
  check_finite(c.dampening, "--dampening");
  if (c.dampening < 0 || c.dampening >= 1)
    usage("--dampening " + short_number(c.dampening), "it must be in [0, 1)", "pass e.g. --dampening 0.1, or leave it at 0");
  if ((c.nesterov || c.dampening != 0) && c.optimizer != OptimizerKind::Sgd)
    usage(std::string(c.nesterov ? "--nesterov" : "--dampening") + " with --optimizer " + name_of(c.optimizer),
          "Nesterov momentum and dampening belong to SGD", "pass --optimizer sgd, or drop the flag");
  if (c.nesterov && (c.momentum == 0 || c.dampening != 0))
    usage("--nesterov with --momentum " + short_number(c.momentum) + " --dampening " + short_number(c.dampening),
          "Nesterov momentum looks ahead along the momentum buffer, so it needs momentum > 0 and no dampening",
          "pass --momentum 0.9 --dampening 0, or drop --nesterov");
  check_finite(c.weight_decay, "--weight-decay");
  if (c.weight_decay < 0) usage("--weight-decay " + short_number(c.weight_decay), "it must not be negative", "pass e.g. --weight-decay 0.01");
  for (auto [v, flag] : {std::pair{c.beta1, "--beta1"}, std::pair{c.beta2, "--beta2"}})
    if (!(v >= 0 && v < 1)) usage(std::string(flag) + " " + short_number(v), "it must be in [0, 1)", "pass e.g. --beta1 0.9 --beta2 0.999");
  check_finite(c.eps, "--eps");
  if (!(c.eps > 0)) usage("--eps " + short_number(c.eps), "it must be positive", "pass e.g. --eps 1e-8");
  if (!(c.min_lr_ratio >= 0 && c.min_lr_ratio <= 1)) usage("--min-lr-ratio " + short_number(c.min_lr_ratio), "it must be in [0, 1]", "pass e.g. --min-lr-ratio 0.1");
  check_finite(c.clip, "--clip");
  if (c.clip < 0) usage("--clip " + short_number(c.clip), "it must not be negative", "pass --clip 1.0, or 0 to turn clipping off");
  if (c.dim && c.heads && c.dim % c.heads)
    usage("--dim " + std::to_string(c.dim) + " is not divisible by --heads " + std::to_string(c.heads),
          "each head gets dim/heads channels", "pick a head count that divides the width");
  if (c.prompt_field.empty() || c.response_field.empty() || c.prompt_field == c.response_field)
    usage("--prompt-field '" + c.prompt_field + "' --response-field '" + c.response_field + "'",
          "they name two different .jsonl fields", "pass two different, non-empty field names");
  check_objective(c);
  if (c.save_shard_bytes <= 0)
    usage("--save-shard-size " + std::to_string(c.save_shard_bytes) + " bytes", "a shard must hold at least one byte",
          "pass e.g. --save-shard-size 5GB (transformers' default) or 2GiB");
  validate_precision(c);
  resolve_device(c.device);
}

Device resolve_device(const std::string& spec) {
  if (spec == "auto") return cuda_available() ? Device::cuda(0) : Device::cpu();
  Device d;
  try {
    d = Device::parse(spec);
  } catch (const Error& e) {
    usage(e.what_part(), e.why(), e.fix());
  }
  if (d.is_meta()) usage("--device meta", "meta has no data, so it cannot train", "pass --device cpu, cuda or auto");
  if (d.is_cuda()) {
    if (!cuda_available())
      throw Error("--device " + spec, "this binary has no CUDA backend or no GPU answers",
                  "pass --device cpu (or auto)");
    if (d.index >= cuda_device_count())
      usage("--device " + spec, "there are only " + std::to_string(cuda_device_count()) + " GPUs",
            "pass --device cuda:0 .. cuda:" + std::to_string(cuda_device_count() - 1));
  }
  return d;
}

std::string config_to_json(const RunConfig& c) { return recipe_json(c, true, 2); }

std::string recipe_json(const RunConfig& c, bool saved_only, int indent) {
  nlohmann::json j;
  for (const RecipeField& f : recipe_fields()) {
    if (saved_only && !f.saved) continue;
    std::visit(
        [&](const auto& m) {
          using M = std::decay_t<decltype(m)>;
          if constexpr (std::is_same_v<M, ChoiceMember>) j[f.key] = m.get(c);
          else if constexpr (std::is_same_v<M, nn::CheckpointSpec RunConfig::*>) j[f.key] = (c.*m).text;
          else j[f.key] = c.*m;
        },
        f.member);
  }
  return j.dump(indent);
}

namespace {

// One stored field into its RunConfig member, its JSON type checked: a damaged file names the
// field ("\"batch\" is string \"x\", not an integer") instead of failing inside the JSON library.
[[noreturn]] void bad_config_field(const char* name, const nlohmann::json& v, const char* want) {
  std::string shown = v.dump();
  if (shown.size() > 40) shown = shown.substr(0, 37) + "...";
  fail("run config is damaged", std::string("\"") + name + "\" is " + v.type_name() + " " + shown + ", not " + want,
       "the checkpoint is damaged; save it again");
}
void read_config_field(const nlohmann::json& v, const char* name, int64_t& out) {
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)))
    bad_config_field(name, v, "an integer");
  out = v.get<int64_t>();
}
void read_config_field(const nlohmann::json& v, const char* name, uint64_t& out) {
  if (!v.is_number_unsigned()) bad_config_field(name, v, "a non-negative integer");
  out = v.get<uint64_t>();
}
void read_config_field(const nlohmann::json& v, const char* name, double& out) {
  if (!v.is_number()) bad_config_field(name, v, "a number");
  out = v.get<double>();
}
void read_config_field(const nlohmann::json& v, const char* name, bool& out) {
  if (!v.is_boolean()) bad_config_field(name, v, "true or false");
  out = v.get<bool>();
}
void read_config_field(const nlohmann::json& v, const char* name, std::string& out) {
  if (!v.is_string()) bad_config_field(name, v, "a string");
  out = v.get<std::string>();
}

}  // namespace

RunConfig config_from_json(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    fail("run config is not valid JSON", e.what(), "the checkpoint is damaged; save it again");
  }
  if (!j.is_object()) fail("run config is damaged", std::string("it is ") + j.type_name() + ", not an object",
                           "the checkpoint is damaged; save it again");
  RunConfig c;
  // Every saved field is required: a missing one would resume with a default the run never had (a
  // deleted "seed" became seed 0). Each save writes them all.
  for (const RecipeField& f : recipe_fields()) {
    if (!f.saved) continue;
    if (!j.contains(f.key) && f.older_saves_lack) continue;  // saved before the field existed: its default
    if (!j.contains(f.key) && !f.if_missing)
      fail("run config is damaged", std::string("\"") + f.key + "\" is missing, and a resumed run would silently take a default",
           "the checkpoint is damaged; save it again");
    const nlohmann::json v = j.contains(f.key) ? j.at(f.key) : nlohmann::json(f.if_missing);
    std::visit(
        [&](const auto& m) {
          using M = std::decay_t<decltype(m)>;
          if constexpr (std::is_same_v<M, ChoiceMember>) {
            std::string name;
            read_config_field(v, f.key, name);
            if (!m.set(c, name)) bad_config_field(f.key, v, ("one of " + m.list()).c_str());
          } else if constexpr (std::is_same_v<M, nn::CheckpointSpec RunConfig::*>) {
            std::string text;
            read_config_field(v, f.key, text);
            try {
              c.*m = parse_checkpoint_flag(text);
            } catch (const Error&) {
              bad_config_field(f.key, v, "a --checkpoint value");
            }
          } else {
            read_config_field(v, f.key, c.*m);
          }
        },
        f.member);
  }
  return c;
}

}  // namespace lt
