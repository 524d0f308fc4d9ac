#include "train/checkpoint.h"

#include <nlohmann/json.hpp>

#include "leantrain/safetensors.h"
#include "train/atomic_dir.h"
#include "train/trainer.h"

namespace lt {

namespace {

constexpr const char* kFormat = "leantrain-checkpoint-1";

[[noreturn]] void corrupt(const std::string& dir, const std::string& file, const std::string& why) {
  fail("checkpoint file " + dir + "/" + file + " is corrupt", why, "save the checkpoint again or pass another directory");
}

nlohmann::json parse_json_file(const std::string& dir, const std::string& file) {
  std::string text = read_text_file(dir, file);
  try {
    return nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    corrupt(dir, file, std::string("it is not valid JSON: ") + e.what());
  }
}

// trainer_state.json with its fields checked, so a damaged file fails here with a clear message.
nlohmann::json read_state(const std::string& dir) {
  nlohmann::json j = parse_json_file(dir, "trainer_state.json");
  if (!j.is_object() || j.value("format", "") != kFormat)
    corrupt(dir, "trainer_state.json", std::string("its \"format\" is not \"") + kFormat + "\"");
  for (const char* key : {"step", "epoch", "batch_index"})
    if (!j.contains(key) || !j[key].is_number_integer() || j[key].get<int64_t>() < 0)
      corrupt(dir, "trainer_state.json", std::string("\"") + key + "\" is missing or not a non-negative integer");
  if (!j.contains("config") || !j["config"].is_object()) corrupt(dir, "trainer_state.json", "it has no \"config\" object");
  return j;
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

// Every weight in DIR/model.safetensors has one dtype, f32, bf16 or f16, as a save writes them;
// anything else means the file was altered, and casting it would hide that.
void check_weight_dtypes(const std::string& dir) {
  const std::string path = dir + "/model.safetensors";
  with_context(dir, [&] {
    io::SafetensorsReader r(path);
    const io::TensorEntry* first = nullptr;
    for (const io::TensorEntry& e : r.entries()) {
      bool known = e.dtype == DType::F32 || e.dtype == DType::BF16 || e.dtype == DType::F16;
      if (!known || (first && e.dtype != first->dtype))
        fail("'" + path + "' has tensor '" + e.name + "' in " + dtype_safetensors_name(e.dtype),
             first && known ? std::string("the other weights are ") + dtype_safetensors_name(first->dtype) +
                                  ", and a checkpoint holds one dtype"
                            : "leantrain saves weights as F32, BF16 or F16",
             "pass a checkpoint directory written by 'leantrain train --save'");
      if (!first) first = &e;
    }
    return 0;
  });
}

}  // namespace

RunConfig read_checkpoint_config(const std::string& dir) { return config_from_json(read_state(dir)["config"].dump()); }

void save_checkpoint(const std::string& dir, Trainer& t) {
  StagedDir stage(dir);
  MemoryCategoryScope other(Category::Other);  // host staging copies are not part of the run
  io::save_module(t.model(), stage.path("model.safetensors"), {{"format", "pt"}});
  write_text_file(stage.path("config.json"), t.model().config_json());

  OptimizerStateDict sd = t.optimizer().state_dict();
  std::vector<std::pair<std::string, Tensor>> states(sd.tensors.begin(), sd.tensors.end());
  io::save_safetensors(stage.path("optimizer.safetensors"), states,
                       {{"optimizer", t.optimizer().name()}, {"step", std::to_string(sd.step)}});

  nlohmann::json j;
  j["format"] = kFormat;
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
  nlohmann::json j = read_state(dir);
  // Casting lets a run continue under another --precision (e.g. bf16-true after 32-true), but
  // only from a file leantrain could have written: one dtype, of a precision it trains in.
  check_weight_dtypes(dir);
  io::LoadOptions lo;
  lo.allow_cast = true;
  with_context(dir, [&] { return io::load_module(t.model(), dir + "/model.safetensors", lo); });

  OptimizerStateDict sd;
  {
    MemoryCategoryScope other(Category::Other);  // host copies; load_state_dict copies into the device state
    std::map<std::string, std::string> meta;
    sd.tensors = with_context(dir, [&] { return io::load_safetensors(dir + "/optimizer.safetensors", Device::cpu(), &meta); });
    auto it = meta.find("optimizer");
    if (it != meta.end() && it->second != t.optimizer().name())
      fail("cannot resume from " + dir + " with --optimizer " + t.optimizer().name(),
           "the checkpoint was trained with " + it->second, "pass --optimizer " + it->second);
    sd.step = j["step"].get<int64_t>();
    with_context(dir, [&] {
      t.optimizer().load_state_dict(sd);
      return 0;
    });
  }
  int64_t epoch = j["epoch"].get<int64_t>(), index = j["batch_index"].get<int64_t>();
  if (index >= t.loader().batches_per_epoch())
    fail("cannot resume from " + dir, "its data position (batch " + std::to_string(index) +
         ") is past the end of this data set's epoch", "resume with the --data and --micro-batch the run used");
  t.loader().seek(epoch, index);
  if (j.contains("dropout_rng") && j["dropout_rng"].is_object())
    for (auto& [path, d] : dropouts(t.model())) {
      auto it = j["dropout_rng"].find(path);
      if (it != j["dropout_rng"].end() && it->contains("offset")) d->generator().offset = (*it)["offset"].get<uint64_t>();
    }
  if (j.contains("hooks") && j["hooks"].is_object())
    for (auto& h : t.hooks()) {
      auto it = j["hooks"].find(h->name());
      if (it != j["hooks"].end() && it->is_string()) h->load_state(it->get<std::string>());
    }
  t.set_steps_done(j["step"].get<int64_t>());
}

void load_weights(const std::string& dir, models::Model& m) {
  read_state(dir);
  with_context(dir, [&] { return io::load_module(m, dir + "/model.safetensors"); });
}

std::string read_model_config(const std::string& dir) { return read_text_file(dir, "config.json"); }

std::string read_tokenizer_name(const std::string& dir) { return read_state(dir).value("tokenizer", ""); }

}  // namespace lt
