#include "train/checkpoint.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <exception>
#include <filesystem>
#include <optional>

#include "dist/data_parallel.h"
#include "io/peft_adapter.h"
#include "io/text_format.h"
#include "io/weight_files.h"
#include "leantrain/precision.h"
#include "leantrain/safetensors.h"
#include "quant/nf4_checkpoint.h"
#include "train/checkpoint_weights.h"
#include "train/dpo.h"
#include "train/atomic_dir.h"
#include "train/finite_state.h"
#include "train/lora_setup.h"
#include "train/run_tokenizer.h"
#include "train/trainer.h"
#include "train/trainer_state.h"

namespace lt {

namespace {

// Every random module's generator (dropout, BigBird's random blocks), by module path: the RNG
// state of a run ("dropout_rng" in trainer_state.json, the name it had when dropout was the only one).
std::vector<std::pair<std::string, nn::RandomSource*>> dropouts(models::Model& m) {
  std::vector<std::pair<std::string, nn::RandomSource*>> out;
  for (auto& [path, mod] : m.named_modules())
    if (auto* d = dynamic_cast<nn::RandomSource*>(mod)) out.emplace_back(path, d);
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

namespace {

// Rank 0's files besides the optimizer state: the weights, config.json, the tokenizer, trainer_state.json.
void write_model_and_trainer_state(StagedDir& stage, Trainer& t, const std::map<const TensorImpl*, Tensor>& host_params) {
  // A LoRA run saves its adapters as PEFT does, not the frozen base (--resume takes it from --model).
  if (t.config().lora_rank > 0) write_lora_adapter(stage.dir(), t.model(), t.config().model);
  else save_model_weights(stage.dir(), t.model(), t.config().save_shard_bytes, host_params);
  // A whole quantised model's config.json carries its quantization_config (quant/nf4_checkpoint.h).
  write_text_file(stage.path("config.json"), t.config().lora_rank > 0 ? t.model().config_json()
                                                                       : nf4_config_json(t.model(), t.model().config_json()));
  write_tokenizer_files(t.task().text_tokenizer, stage);  // tokenizer.json and companions, when the run has one
  // --objective dpo of a full fine-tune: the starting weights' log-probabilities (the reference).
  if (t.task().objective) t.task().objective->save(stage.dir());

  nlohmann::json j;
  j["format"] = kCheckpointFormat;
  j["step"] = t.steps_done();
  j["epoch"] = t.loader().epoch();
  j["batch_index"] = t.loader().index();
  j["model_type"] = t.model().model_type();
  j["tokenizer"] = t.task().tokenizer;
  if (const std::string d = t.task().text_tokenizer.digest(); !d.empty()) j["tokenizer_sha256"] = d;
  nlohmann::json rng = nlohmann::json::object();
  for (auto& [path, d] : dropouts(t.model())) rng[path] = {{"seed", d->generator().seed}, {"offset", d->generator().offset}};
  j["dropout_rng"] = rng;
  nlohmann::json hooks = nlohmann::json::object();
  for (auto& h : t.hooks()) hooks[h->name()] = h->state();
  j["hooks"] = hooks;
  j["config"] = nlohmann::json::parse(config_to_json(t.config()));
  write_text_file(stage.path("trainer_state.json"), j.dump(2));
}

// The finite-state guard's verdict: why this step's state must not be saved ("" when it may).
// `weights`: whether to check the model too (the rank that writes it).
std::string unsaveable(Trainer& t, const OptimizerStateDict& sd, bool weights,
                       const std::map<const TensorImpl*, Tensor>& host_params) {
  std::string bad = weights ? nonfinite_weight(t.model(), host_params) : "";
  return bad.empty() ? bad_optimizer_state(sd.tensors) : bad;
}

NumericError diverged(const std::string& dir, const Trainer& t, const std::string& bad) {
  return NumericError("not saving the checkpoint of step " + std::to_string(t.steps_done()) + " to " + dir,
                      bad + ": training diverged", "lower the learning rate, e.g. --lr " + short_number(t.config().lr / 10, 3));
}

std::string state_shard_name(int rank, int world) {
  char name[64];
  std::snprintf(name, sizeof name, "optimizer-%05d-of-%05d.safetensors", rank, world);
  return name;
}

// Every rank learns whether some rank failed; the failing ones rethrow their own error, the
// others say which rank stopped the save. Collective, so no rank waits on one that gave up.
void agree(dist::Communicator& comm, const std::exception_ptr& mine, const std::string& dir) {
  const int64_t failed = mine ? 1 : 0;
  std::vector<int64_t> all(size_t(comm.size()));
  comm.all_gather(&failed, all.data(), 1, DType::I64);
  for (int r = 0; r < comm.size(); ++r) {
    if (!all[size_t(r)]) continue;
    if (mine) std::rethrow_exception(mine);
    throw Error("checkpoint " + dir + " not saved", "rank " + std::to_string(r) + " could not write its part (its line says why)",
                "fix that rank's cause; the previous checkpoint in " + dir + " is unchanged");
  }
}

// --save-sharded: each rank writes its optimizer-state shard into DIR.tmp, rank 0 the rest and
// optimizer.index.json (the shards' files), then swaps DIR in. The ranks agree after each phase.
void save_sharded(const std::string& dir, Trainer& t, dist::CheckpointGather& gathered) {
  dist::Communicator& comm = dist::world();
  const int rank = comm.rank(), w = comm.size();
  OptimizerStateDict sd = std::move(gathered.state);  // this rank's own
  std::exception_ptr failure;
  if (const std::string bad = unsaveable(t, sd, gathered.writes(), gathered.host_params); !bad.empty())
    failure = std::make_exception_ptr(diverged(dir, t, bad));
  agree(comm, failure, dir);
  std::optional<StagedDir> stage;
  try {
    if (gathered.writes()) stage.emplace(dir);
  } catch (...) {
    failure = std::current_exception();
  }
  agree(comm, failure, dir);
  std::string tmp = stage ? stage->dir() : std::string();  // where the shards go: rank 0's DIR.tmp
  int64_t len = int64_t(tmp.size());
  comm.broadcast(&len, sizeof len, 0);
  tmp.resize(size_t(len));
  comm.broadcast(tmp.data(), len, 0);
  try {
    std::vector<std::pair<std::string, Tensor>> states(sd.tensors.begin(), sd.tensors.end());
    io::save_safetensors(tmp + "/" + state_shard_name(rank, w), states,
                         {{"optimizer", t.optimizer().name()}, {"step", std::to_string(sd.step)},
                          {"rank", std::to_string(rank)}, {"world_size", std::to_string(w)}});
  } catch (...) {
    failure = std::current_exception();
  }
  agree(comm, failure, dir);
  if (!stage) return;
  nlohmann::json index;
  index["format"] = "leantrain-optimizer-shards";
  index["optimizer"] = t.optimizer().name();
  index["world_size"] = w;
  for (int r = 0; r < w; ++r) index["files"].push_back(state_shard_name(r, w));
  write_text_file(stage->path(kStateIndexFile), index.dump(2));
  write_model_and_trainer_state(*stage, t, gathered.host_params);
  stage->commit();
}

// The optimizer state of a --save-sharded checkpoint: the entries this rank steps, from every
// shard file the manifest names (any number of ranks wrote them). Hostile manifests are refused.
std::map<std::string, Tensor> load_state_shards(const std::string& dir, Trainer& t, std::map<std::string, std::string>& meta) {
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(read_text_file(dir, kStateIndexFile));
  } catch (const nlohmann::json::exception& e) {
    checkpoint_corrupt(dir, kStateIndexFile, std::string("it is not valid JSON: ") + e.what());
  }
  if (!index.is_object() || !index.contains("files") || !index["files"].is_array() || !index.contains("world_size") ||
      !index["world_size"].is_number_integer())
    checkpoint_corrupt(dir, kStateIndexFile, "it needs \"files\" (a list) and \"world_size\" (an integer)");
  const int64_t w = index["world_size"].get<int64_t>();
  if (w < 1 || w > 65536 || int64_t(index["files"].size()) != w)
    checkpoint_corrupt(dir, kStateIndexFile, "\"world_size\" and the number of files disagree or are out of range");
  std::map<std::string, Tensor> mine;
  for (int64_t r = 0; r < w; ++r) {
    const nlohmann::json& f = index["files"][size_t(r)];
    // Only the names leantrain writes: nothing outside DIR is ever opened.
    if (!f.is_string() || f.get<std::string>() != state_shard_name(int(r), int(w)))
      checkpoint_corrupt(dir, kStateIndexFile, "file " + std::to_string(r) + " is not named " + state_shard_name(int(r), int(w)));
    std::map<std::string, std::string> m;
    std::map<std::string, Tensor> part =
        with_context(dir, [&] { return io::load_safetensors(dir + "/" + f.get<std::string>(), Device::cpu(), &m); });
    if (r == 0) meta = m;
    if (m["optimizer"] != meta["optimizer"])
      checkpoint_corrupt(dir, f.get<std::string>(), "its optimizer (" + m["optimizer"] + ") differs from shard 0's");
    for (auto& [key, v] : dist::owned_state(t, std::move(part)))
      if (!mine.emplace(key, v).second) checkpoint_corrupt(dir, f.get<std::string>(), "\"" + key + "\" is in two shards");
  }
  return mine;
}

}  // namespace

void save_checkpoint(const std::string& dir, Trainer& t) {
  MemoryCategoryScope other(Category::Other);  // host staging copies are not part of the run
  // Several ranks: every rank calls this. Sharded state comes to rank 0, which alone writes,
  // unless each rank writes its own (--save-sharded).
  dist::CheckpointGather gathered(t, /*gather_state=*/!t.config().save_sharded);
  if (t.config().save_sharded) return save_sharded(dir, t, gathered);
  if (!gathered.writes()) return;
  OptimizerStateDict sd = std::move(gathered.state);
  // The finite-state guard: a diverged state never replaces a checkpoint.
  if (const std::string bad = unsaveable(t, sd, /*weights=*/true, gathered.host_params); !bad.empty())
    throw diverged(dir, t, bad);

  StagedDir stage(dir);
  std::vector<std::pair<std::string, Tensor>> states(sd.tensors.begin(), sd.tensors.end());
  io::save_safetensors(stage.path("optimizer.safetensors"), states,
                       {{"optimizer", t.optimizer().name()}, {"step", std::to_string(sd.step)}});
  write_model_and_trainer_state(stage, t, gathered.host_params);
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
    // alpha / r scales every adapter's update: another alpha would change the model it continues.
    const io::PeftAdapterConfig a = with_context(dir, [&] { return io::read_peft_adapter_config(dir); });
    if (a.lora_alpha != t.config().lora_alpha)
      throw UsageError("cannot resume from " + dir + " with --lora-alpha " + short_number(t.config().lora_alpha),
                       "its adapters were trained with lora_alpha " + short_number(a.lora_alpha) +
                           " (alpha / r scales their update)",
                       "drop --lora-alpha: a resumed run continues with the checkpoint's");
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

  if (t.task().objective) t.task().objective->load(dir);  // a full fine-tune's reference, not recomputed

  OptimizerStateDict sd;
  {
    MemoryCategoryScope other(Category::Other);  // host copies; load_state_dict copies into the device state
    std::map<std::string, std::string> meta;
    const bool shards = std::filesystem::exists(std::filesystem::path(dir) / kStateIndexFile, ec);
    const char* state_file = shards ? kStateIndexFile : "optimizer.safetensors";
    if (shards) sd.tensors = load_state_shards(dir, t, meta);  // this rank's part already
    else sd.tensors = with_context(dir, [&] { return io::load_safetensors(dir + "/optimizer.safetensors", Device::cpu(), &meta); });
    auto it = meta.find("optimizer");
    if (it != meta.end() && it->second != t.optimizer().name())
      fail("cannot resume from " + dir + " with --optimizer " + t.optimizer().name(),
           "the checkpoint was trained with " + it->second, "pass --optimizer " + it->second);
    if (std::string bad = bad_optimizer_state(sd.tensors); !bad.empty())
      checkpoint_corrupt(dir, state_file, bad + "; a run that diverged saved it, or it was altered");
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
  // merge's output is a model directory too; a training checkpoint that lost its
  // trainer_state.json is not (reading it names the missing file).
  return !std::filesystem::exists(std::filesystem::path(dir) / "trainer_state.json", ec) &&
         (!is_leantrain_checkpoint(dir) || marker_kind(dir) == SavedKind::Model) && has_model_weights(dir);
}

DType checkpoint_param_dtype(const std::string& dir) {
  if (is_plain_model_dir(dir)) return with_context(dir, [&] { return stored_weights_dtype(dir); });
  return precision_policy(read_checkpoint_config(dir).precision).param_dtype;
}

std::string read_model_config(const std::string& dir) { return read_text_file(dir, "config.json"); }

std::string read_tokenizer_name(const std::string& dir) { return read_trainer_state(dir).tokenizer; }

}  // namespace lt
