#include "train/checkpoint.h"

#include <nlohmann/json.hpp>

#include <filesystem>

#include "dist/data_parallel.h"
#include "io/text_format.h"
#include "io/weight_files.h"
#include "leantrain/precision.h"
#include "leantrain/safetensors.h"
#include "quant/nf4_checkpoint.h"
#include "train/checkpoint_weights.h"
#include "train/atomic_dir.h"
#include "train/finite_state.h"
#include "train/lora_setup.h"
#include "train/run_tokenizer.h"
#include "train/trainer.h"
#include "train/trainer_state.h"

namespace lt {

namespace {

nlohmann::json parse_json_file(const std::string& dir, const std::string& file) {
  std::string text = read_text_file(dir, file);
  try {
    return nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    checkpoint_corrupt(dir, file, std::string("it is not valid JSON: ") + e.what());
  }
}

// Every dropout module's generator, by module path: the RNG state of a run.
std::vector<std::pair<std::string, nn::Dropout*>> dropouts(models::Model& m) {
  std::vector<std::pair<std::string, nn::Dropout*>> out;
  for (auto& [path, mod] : m.named_modules())
    if (auto* d = dynamic_cast<nn::Dropout*>(mod)) out.emplace_back(path, d);
  return out;
}

// Adds the checkpoint directory to an error from a file reader, keeping its why and fix.
template <class F>
auto with_context(const std::string& dir, F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    throw Error("cannot load checkpoint " + dir + ": " + e.what_part(), e.why(), e.fix());
  }
}

// The finite-state guard on a loaded model: a damaged or diverged checkpoint is refused.
void check_loaded_weights(const std::string& dir, const models::Model& m) {
  if (std::string bad = nonfinite_weight(m); !bad.empty()) {
    std::error_code ec;  // the file that holds the weights, or the index of the shards that do
    const bool single = std::filesystem::exists(std::filesystem::path(dir) / io::kWeightsFile, ec);
    checkpoint_corrupt(dir, single ? io::kWeightsFile : io::kWeightsIndexFile,
                       bad + "; a run that diverged saved it, or it was altered");
  }
}

}  // namespace

RunConfig read_checkpoint_config(const std::string& dir) {
  const TrainerState s = read_trainer_state(dir);
  try {
    return config_from_json(s.config);
  } catch (const Error& e) {
    checkpoint_corrupt(dir, "trainer_state.json", "its \"config\" is damaged: " + e.why());
  }
}

void save_checkpoint(const std::string& dir, Trainer& t) {
  MemoryCategoryScope other(Category::Other);  // host staging copies are not part of the run
  // Several ranks: every rank calls this; sharded state comes to rank 0, which alone writes.
  dist::CheckpointGather gathered(t);
  if (!gathered.writes()) return;
  OptimizerStateDict sd = std::move(gathered.state);
  // The finite-state guard: a diverged state never replaces a checkpoint.
  std::string bad = nonfinite_weight(t.model());
  if (bad.empty()) bad = bad_optimizer_state(sd.tensors);
  if (!bad.empty())
    throw NumericError("not saving the checkpoint of step " + std::to_string(t.steps_done()) + " to " + dir,
                       bad + ": training diverged",
                       "lower the learning rate, e.g. --lr " + short_number(t.config().lr / 10, 3));

  StagedDir stage(dir);
  // A LoRA run saves its adapters as PEFT does, not the frozen base (--resume takes it from --model).
  if (t.config().lora_rank > 0) write_lora_adapter(stage.dir(), t.model(), t.config().model);
  else save_model_weights(stage.dir(), t.model(), t.config().save_shard_bytes);
  // A whole quantised model's config.json carries its quantization_config (quant/nf4_checkpoint.h).
  write_text_file(stage.path("config.json"), t.config().lora_rank > 0 ? t.model().config_json()
                                                                       : nf4_config_json(t.model(), t.model().config_json()));
  write_tokenizer_files(t.task().text_tokenizer, stage);  // tokenizer.json and companions, when the run has one

  std::vector<std::pair<std::string, Tensor>> states(sd.tensors.begin(), sd.tensors.end());
  io::save_safetensors(stage.path("optimizer.safetensors"), states,
                       {{"optimizer", t.optimizer().name()}, {"step", std::to_string(sd.step)}});

  nlohmann::json j;
  j["format"] = kCheckpointFormat;
  j["step"] = t.steps_done();
  j["epoch"] = t.loader().epoch();
  j["batch_index"] = t.loader().index();
  j["model_type"] = t.model().model_type();
  j["tokenizer"] = t.task().tokenizer;
  nlohmann::json rng = nlohmann::json::object();
  for (auto& [path, d] : dropouts(t.model())) rng[path] = {{"seed", d->generator().seed}, {"offset", d->generator().offset}};
  j["dropout_rng"] = rng;
  nlohmann::json hooks = nlohmann::json::object();
  for (auto& h : t.hooks()) hooks[h->name()] = h->state();
  j["hooks"] = hooks;
  j["config"] = nlohmann::json::parse(config_to_json(t.config()));
  write_text_file(stage.path("trainer_state.json"), j.dump(2));
  stage.commit();
}

void load_checkpoint(const std::string& dir, Trainer& t) {
  const TrainerState s = read_trainer_state(dir);
  // Casting lets a run continue under another --precision (e.g. bf16-true after 32-true), but
  // only from files leantrain could have written: one dtype, of a precision it trains in.
  std::error_code ec;
  const bool adapters = std::filesystem::exists(std::filesystem::path(dir) / io::kAdapterConfigFile, ec);
  if (adapters != (t.config().lora_rank > 0))
    fail("cannot resume from " + dir + " with --lora-rank " + std::to_string(t.config().lora_rank),
         adapters ? "it is a LoRA checkpoint: it holds adapters, not the model's weights"
                  : "it holds a whole model, not LoRA adapters",
         adapters ? "drop --lora-rank 0 (the checkpoint's own settings continue it)"
                  : "drop --lora-rank, or start a LoRA run from it with --model " + dir);
  if (t.config().lora_rank > 0) {  // the adapters; the base was loaded from --model
    with_context(dir, [&] {
      load_lora_adapter(dir, t.model());
      return 0;
    });
    if (std::string bad = nonfinite_weight(t.model()); !bad.empty())
      checkpoint_corrupt(dir, io::kAdapterWeightsFile, bad + "; a run that diverged saved it, or it was altered");
  } else {
    with_context(dir, [&] { return load_model_weights(dir, t.model(), /*leantrain_checkpoint=*/true); });
    check_loaded_weights(dir, t.model());
  }

  OptimizerStateDict sd;
  {
    MemoryCategoryScope other(Category::Other);  // host copies; load_state_dict copies into the device state
    std::map<std::string, std::string> meta;
    sd.tensors = with_context(dir, [&] { return io::load_safetensors(dir + "/optimizer.safetensors", Device::cpu(), &meta); });
    auto it = meta.find("optimizer");
    if (it != meta.end() && it->second != t.optimizer().name())
      fail("cannot resume from " + dir + " with --optimizer " + t.optimizer().name(),
           "the checkpoint was trained with " + it->second, "pass --optimizer " + it->second);
    if (std::string bad = bad_optimizer_state(sd.tensors); !bad.empty())
      checkpoint_corrupt(dir, "optimizer.safetensors", bad + "; a run that diverged saved it, or it was altered");
    sd.step = s.step;
    sd.tensors = dist::owned_state(t, std::move(sd.tensors));  // a rank that steps a shard keeps its part
    with_context(dir, [&] {
      t.optimizer().load_state_dict(sd);
      return 0;
    });
  }
  if (s.batch_index >= t.loader().batches_per_epoch())
    fail("cannot resume from " + dir, "its data position (batch " + std::to_string(s.batch_index) +
         ") is past the end of this data set's epoch", "resume with the --data and --micro-batch the run used");
  t.loader().seek(s.epoch, s.batch_index);
  for (auto& [path, d] : dropouts(t.model())) {
    auto it = s.dropout_offsets.find(path);
    if (it != s.dropout_offsets.end()) d->generator().offset = it->second;
  }
  for (auto& h : t.hooks()) {
    auto it = s.hooks.find(h->name());
    if (it != s.hooks.end()) with_context(dir, [&] {
        h->load_state(it->second);
        return 0;
      });
  }
  t.set_steps_done(s.step);
}

void load_weights(const std::string& dir, models::Model& m) {
  const bool ours = !is_plain_model_dir(dir);
  if (ours && read_checkpoint_config(dir).lora_rank > 0)
    fail("cannot load the weights of " + dir, "it is a LoRA checkpoint: it holds adapters, not a model",
         "merge them into the base first: leantrain merge --model BASE --adapter " + dir + " --out DIR");
  with_context(dir, [&] { return load_model_weights(dir, m, ours); });
  check_loaded_weights(dir, m);
}

bool is_plain_model_dir(const std::string& dir) {
  check_checkpoint_dir(dir);
  std::error_code ec;
  return !std::filesystem::exists(std::filesystem::path(dir) / "trainer_state.json", ec) &&
         !is_leantrain_checkpoint(dir) && has_model_weights(dir);
}

DType checkpoint_param_dtype(const std::string& dir) {
  if (is_plain_model_dir(dir)) return with_context(dir, [&] { return stored_weights_dtype(dir); });
  return precision_policy(read_checkpoint_config(dir).precision).param_dtype;
}

std::string read_model_config(const std::string& dir) { return read_text_file(dir, "config.json"); }

std::string read_tokenizer_name(const std::string& dir) { return read_trainer_state(dir).tokenizer; }

}  // namespace lt
