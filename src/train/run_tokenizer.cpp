#include "train/run_tokenizer.h"

#include <algorithm>
#include <filesystem>

#include "io/input_file.h"
#include "io/sha256.h"
#include "leantrain/train.h"
#include "models/registry.h"
#include "train/atomic_dir.h"
#include "train/checkpoint.h"
#include "train/trainer_state.h"

namespace lt {

namespace fs = std::filesystem;

namespace {

// tokenizer.json files are a few MB (Llama 3's is 9 MB); this cap only stops a wrong path from
// being read whole.
constexpr int64_t kMaxTokenizerBytes = int64_t(256) << 20;

// The tokenizer files' bytes, not yet parsed.
RunTokenizer read_json_files(const std::string& json_path) {
  RunTokenizer t;
  t.json_path = json_path;
  const fs::path dir = fs::path(json_path).parent_path();
  for (const char* name : kTokenizerFiles) {
    const fs::path p = name == std::string("tokenizer.json") ? fs::path(json_path) : dir / name;
    if (name != std::string("tokenizer.json") && !fs::exists(p)) continue;
    t.files.emplace_back(name, io::read_input_file(p.string(), kMaxTokenizerBytes, "as a tokenizer file",
                                                   "pass a Hugging Face tokenizer.json"));
  }
  return t;
}

RunTokenizer from_json_file(const std::string& json_path) {
  RunTokenizer t = read_json_files(json_path);
  t.tokenizer = text::load_tokenizer_json(json_path);
  return t;
}

// A tokenizer file of checkpoint `dir` that is a symlink must stay inside the directory: the
// checkpoint is what --resume and generate trust, not whatever the link reaches.
void refuse_outside_link(const std::string& dir, const char* name) {
  const fs::path p = fs::path(dir) / name;
  std::error_code ec;
  if (!fs::is_symlink(p, ec)) return;
  const fs::path real = fs::weakly_canonical(p, ec), root = fs::weakly_canonical(dir, ec);
  const auto [end, _] = std::mismatch(root.begin(), root.end(), real.begin(), real.end());
  if (end != root.end())
    fail("checkpoint " + dir + ": " + name + " is a symlink to " + real.string() + ", outside the checkpoint",
         "a checkpoint's tokenizer must be the one it saved", "copy the run's own " + std::string(name) + " into it");
}

// A training checkpoint's tokenizer against what its trainer_state.json recorded at the save:
// the files' digest, before they are parsed; for a save older than the digest, the kind.
RunTokenizer saved_tokenizer(const std::string& dir, const std::string& json_path) {
  const TrainerState s = read_trainer_state(dir);
  for (const char* name : kTokenizerFiles) refuse_outside_link(dir, name);
  RunTokenizer t = read_json_files(json_path);
  const std::string fix = "put back the tokenizer files the run saved, or pass another checkpoint";
  if (!s.tokenizer_sha256.empty() && t.digest() != s.tokenizer_sha256)
    fail("checkpoint " + dir + ": its tokenizer files are not the ones it was saved with",
         "their SHA-256 is " + t.digest() + ", trainer_state.json records " + s.tokenizer_sha256, fix);
  t.tokenizer = text::load_tokenizer_json(json_path);
  if (s.tokenizer_sha256.empty() && !s.tokenizer.empty() && s.tokenizer != t.tokenizer->kind())
    fail("checkpoint " + dir + ": its tokenizer.json is a '" + t.tokenizer->kind() + "' tokenizer",
         "trainer_state.json says the run used '" + s.tokenizer + "'", fix);
  return t;
}

}  // namespace

std::string RunTokenizer::digest() const {
  if (files.empty()) return "";
  io::Sha256 h;
  for (const auto& [name, bytes] : files) {  // name and length first: no two file sets hash alike by shifting bytes
    h.update(name);
    h.update(std::string(1, '\0') + std::to_string(bytes.size()) + '\0');
    h.update(bytes);
  }
  return h.hex();
}

std::string RunTokenizer::describe() const {
  return "tokenizer " + tokenizer->kind() + " (vocab " + std::to_string(tokenizer->vocab_size()) +
         (json_path.empty() ? "" : ", " + json_path) + ")";
}

std::string resolve_tokenizer_json(const std::string& flag_value, const std::string& model_dir) {
  if (!flag_value.empty()) {
    std::error_code ec;
    if (!fs::exists(flag_value, ec))
      fail("--tokenizer " + flag_value + " not found", "no such file or directory",
           "pass a tokenizer.json or a directory holding one");
    if (!fs::is_directory(flag_value, ec)) return flag_value;
    const fs::path json = fs::path(flag_value) / "tokenizer.json";
    if (!fs::exists(json, ec))
      fail("--tokenizer " + flag_value, "the directory holds no tokenizer.json",
           "pass a tokenizer.json or a directory holding one");
    return json.string();
  }
  if (!model_dir.empty()) {
    const fs::path json = fs::path(model_dir) / "tokenizer.json";
    std::error_code ec;
    if (fs::exists(json, ec)) return json.string();
  }
  return "";
}

RunTokenizer load_run_tokenizer(const std::string& json_path, const models::ModelFamily& family,
                                const std::string& model_name) {
  if (!json_path.empty()) return from_json_file(json_path);
  if (family.tokenizer() != "bytes")
    throw UsageError("model " + model_name + " has no tokenizer",
                     family.display_name() + " models read text through a tokenizer.json",
                     "pass --tokenizer PATH (a tokenizer.json, or a directory holding one), or --data synthetic "
                     "for random tokens (plan, speed runs)");
  RunTokenizer t;
  t.tokenizer = text::byte_tokenizer();
  return t;
}

RunTokenizer checkpoint_tokenizer(const std::string& dir) {
  check_checkpoint_dir(dir);
  const fs::path json = fs::path(dir) / "tokenizer.json";
  std::error_code ec;
  // A plain model directory (save_pretrained's, merge's: no trainer_state.json) is taken as it
  // is; a Hugging Face cache's snapshot links its files to blobs elsewhere.
  const bool plain = is_plain_model_dir(dir);
  if (fs::exists(json, ec)) {
    return plain ? from_json_file(json.string()) : saved_tokenizer(dir, json.string());
  }
  // A plain model directory without tokenizer.json gets the byte tokenizer; the caller refuses
  // it for a family that reads another.
  const std::string name = plain ? "bytes" : read_tokenizer_name(dir);
  if (name != "bytes")
    fail("checkpoint " + dir + " has no tokenizer.json",
         name.empty() ? "it names no tokenizer" : "it was trained with a '" + name + "' tokenizer",
         "copy the run's tokenizer.json into it, or pass another checkpoint");
  RunTokenizer t;
  t.tokenizer = text::byte_tokenizer();
  return t;
}

bool same_tokenizer_json(const RunTokenizer& saved, const std::string& json_path) {
  if (saved.files.empty()) return false;  // a built-in tokenizer
  return io::read_input_file(json_path, kMaxTokenizerBytes, "as a tokenizer file", "pass a Hugging Face tokenizer.json") ==
         saved.files.front().second;
}

void check_tokenizer_fits(const text::Tokenizer& tok, int64_t model_vocab, const std::string& model_name) {
  if (tok.vocab_size() > model_vocab)
    throw UsageError("the tokenizer has " + std::to_string(tok.vocab_size()) + " ids",
                     "model " + model_name + " embeds only " + std::to_string(model_vocab),
                     "pass a tokenizer with at most " + std::to_string(model_vocab) +
                         " ids, or a model whose vocab_size is at least " + std::to_string(tok.vocab_size()));
}

namespace {
const std::string* file_of(const RunTokenizer& t, const std::string& name) {
  for (const auto& [n, bytes] : t.files)
    if (n == name) return &bytes;
  return nullptr;
}
}  // namespace

text::ChatTemplate run_chat_template(const RunTokenizer& t) {
  const std::string where = t.json_path.empty() ? std::string("the ") + (t.tokenizer ? t.tokenizer->kind() : "built-in") + " tokenizer"
                                                : fs::path(t.json_path).parent_path().string();
  const std::string* config = file_of(t, "tokenizer_config.json");
  const std::string* jinja = file_of(t, "chat_template.jinja");
  LT_CHECK(jinja || config, "chat template of " + where, "it has no tokenizer_config.json and no chat_template.jinja",
           "pass --chat-template FILE, or use the tokenizer directory of a chat (instruct) model");
  const std::string name = (fs::path(t.json_path).parent_path() / (jinja ? "chat_template.jinja" : "tokenizer_config.json")).string();
  return text::ChatTemplate::from_config(config ? *config : "", jinja ? *jinja : "", name);
}

void set_chat_template(RunTokenizer& t, const std::string& path) {
  if (t.files.empty())
    throw UsageError("--chat-template " + path,
                     "the run reads the byte tokenizer, which has no special tokens to mark turns with",
                     "pass --tokenizer with a tokenizer.json");
  std::string source = text::ChatTemplate::template_of_file(path);
  // Checked now, before any data is read: it must parse.
  const std::string* config = file_of(t, "tokenizer_config.json");
  (void)text::ChatTemplate::from_config(config ? *config : "", source, path);
  for (auto it = t.files.begin(); it != t.files.end(); ++it)
    if (it->first == "chat_template.jinja") {
      t.files.erase(it);
      break;
    }
  t.files.emplace_back("chat_template.jinja", std::move(source));
}

void write_tokenizer_files(const RunTokenizer& t, const StagedDir& stage) {
  for (const auto& [name, bytes] : t.files) write_text_file(stage.path(name), bytes);
}

}  // namespace lt
