#include "train/trainer_state.h"

#include <limits>
#include <nlohmann/json.hpp>

#include "leantrain/error.h"
#include "train/atomic_dir.h"

namespace lt {

namespace {

using Json = nlohmann::json;

// Reads fields of one JSON object, naming the path to a bad one ("dropout_rng"."x"."offset").
class Fields {
 public:
  Fields(const std::string& dir, const Json& j, std::string where) : dir_(dir), j_(j), where_(std::move(where)) {
    if (!j_.is_object()) bad("", "is " + std::string(j_.type_name()) + ", not an object");
  }
  const Json* find(const std::string& key, bool required) const {
    auto it = j_.find(key);
    if (it != j_.end()) return &*it;
    if (required) bad(key, "is missing");
    return nullptr;
  }
  int64_t count(const std::string& key) const {  // a required non-negative integer
    const Json& v = *find(key, true);
    const bool too_big = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max());
    if (!v.is_number_integer() || too_big || v.get<int64_t>() < 0)
      bad(key, "is " + shown(v) + ", not an integer from 0 to 2^63-1");
    return v.get<int64_t>();
  }
  uint64_t unsigned_integer(const std::string& key) const {
    const Json& v = *find(key, true);
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
      bad(key, "is " + shown(v) + ", not a non-negative integer");
    return v.get<uint64_t>();
  }
  std::string text(const std::string& key, bool required) const {
    const Json* v = find(key, required);
    if (!v) return "";
    if (!v->is_string()) bad(key, "is " + shown(*v) + ", not a string");
    return v->get<std::string>();
  }
  [[noreturn]] void bad(const std::string& key, const std::string& why) const {
    std::string path = where_;
    if (!key.empty()) path += (path.empty() ? "" : ".") + ("\"" + key + "\"");
    checkpoint_corrupt(dir_, "trainer_state.json", (path.empty() ? "the file" : path) + " " + why);
  }
  static std::string shown(const Json& v) {
    std::string s = v.dump();
    if (s.size() > 40) s = s.substr(0, 37) + "...";
    return std::string(v.type_name()) + " " + s;
  }

 private:
  const std::string& dir_;
  const Json& j_;
  std::string where_;
};

std::string quoted(const std::string& k) { return "\"" + k + "\""; }

}  // namespace

void checkpoint_corrupt(const std::string& dir, const std::string& file, const std::string& why) {
  fail("checkpoint file " + dir + "/" + file + " is corrupt", why, "save the checkpoint again or pass another directory");
}

TrainerState read_trainer_state(const std::string& dir) {
  const std::string text = read_text_file(dir, "trainer_state.json");
  Json j;
  try {
    j = Json::parse(text);
  } catch (const std::exception& e) {
    checkpoint_corrupt(dir, "trainer_state.json", std::string("it is not valid JSON: ") + e.what());
  }
  const Fields f(dir, j, "");
  const Json* format = f.find("format", false);
  if (!format || *format != kCheckpointFormat)
    f.bad("", std::string("has no \"format\": \"") + kCheckpointFormat + "\", so it is not a leantrain checkpoint's");
  TrainerState s;
  s.step = f.count("step");
  s.epoch = f.count("epoch");
  s.batch_index = f.count("batch_index");
  s.model_type = f.text("model_type", false);
  s.tokenizer = f.text("tokenizer", false);
  s.tokenizer_sha256 = f.text("tokenizer_sha256", false);
  if (const Json* rng = f.find("dropout_rng", false)) {
    const Fields modules(dir, *rng, quoted("dropout_rng"));
    for (const auto& [path, gen] : rng->items()) {
      const Fields g(dir, gen, quoted("dropout_rng") + "." + quoted(path));
      g.unsigned_integer("seed");
      s.dropout_offsets[path] = g.unsigned_integer("offset");
    }
  }
  if (const Json* hooks = f.find("hooks", false)) {
    const Fields h(dir, *hooks, quoted("hooks"));
    for (const auto& [name, state] : hooks->items()) s.hooks[name] = h.text(name, true);
  }
  const Json* config = f.find("config", true);
  Fields(dir, *config, quoted("config"));  // an object; its fields are checked by config_from_json
  s.config = config->dump();
  return s;
}

}  // namespace lt
