// The tokenizer of a run and where it comes from: --tokenizer, else the model directory's
// tokenizer.json, else the model family's default (the byte tokenizer for GPT-2); a resumed run
// and `generate` use the checkpoint's copy. The files it was read from are kept in memory as the
// run started, so every checkpoint stores exactly the tokenizer the run used.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace lt {

namespace models { class ModelFamily; }
class StagedDir;

// The tokenizer.json companions copied with it when present: bos/eos and added-token settings,
// and the chat template (chat_template.jinja replaces tokenizer_config.json's, as in transformers).
inline constexpr const char* kTokenizerFiles[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                                  "chat_template.jinja"};

struct RunTokenizer {
  std::shared_ptr<const text::Tokenizer> tokenizer;
  std::string json_path;  // the tokenizer.json it was loaded from; "" for a family's built-in one
  std::vector<std::pair<std::string, std::string>> files;  // file name, bytes (of kTokenizerFiles)
  // "tokenizer bpe-bytelevel (vocab 8192, PATH)" for the run's description line.
  std::string describe() const;
  // SHA-256 over the files' names and bytes, which trainer_state.json records ("" without files).
  std::string digest() const;
};

// Which tokenizer.json a run reads: --tokenizer's (a file, or a directory holding tokenizer.json),
// else `model_dir`'s tokenizer.json when it has one (model_dir: the directory the model was
// loaded from, "" for a preset), else "" (the family's default). A missing file is an lt::Error.
std::string resolve_tokenizer_json(const std::string& flag_value, const std::string& model_dir);

// The tokenizer at `json_path` with its companion files, or for "" the family's default; a family
// with none ("needs a tokenizer.json") is a UsageError telling to pass --tokenizer.
RunTokenizer load_run_tokenizer(const std::string& json_path, const models::ModelFamily& family,
                                const std::string& model_name);

// The tokenizer a checkpoint directory holds: its tokenizer.json, else the one it names
// (trainer_state.json's "tokenizer": "bytes" for checkpoints of byte-level runs). In a training
// checkpoint the files must be those it saved: their digest is the one trainer_state.json records
// (checkpoints saved before the digest: the tokenizer kind it names), and none may be a symlink
// that leads out of the directory.
RunTokenizer checkpoint_tokenizer(const std::string& dir);

// Whether the tokenizer.json at `json_path` has the bytes of the one `saved` was read from.
bool same_tokenizer_json(const RunTokenizer& saved, const std::string& json_path);

// The model embeds ids below model_vocab: a tokenizer with more ids is a UsageError with both numbers.
void check_tokenizer_fits(const text::Tokenizer& tok, int64_t model_vocab, const std::string& model_name);

// The run's chat template, from its files (tokenizer_config.json's chat_template, or
// chat_template.jinja, which wins): conversation data and `generate --chat` render with it. An
// lt::Error naming the tokenizer when it has none or leantrain cannot read it.
text::ChatTemplate run_chat_template(const RunTokenizer& t);
// --chat-template FILE (a .jinja file, or a tokenizer_config.json holding one): its template
// becomes the run's chat_template.jinja, so checkpoints save it and generate --chat reads it.
// A UsageError for the byte tokenizer (no files, no special tokens to end a turn with).
void set_chat_template(RunTokenizer& t, const std::string& path);

// Writes the files into a checkpoint being saved (nothing for a built-in tokenizer).
void write_tokenizer_files(const RunTokenizer& t, const StagedDir& stage);

}  // namespace lt
