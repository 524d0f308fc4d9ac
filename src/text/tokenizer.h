// Text <-> token ids. One interface for every tokenizer leantrain reads: the 256-id byte
// tokenizer of the byte-level models, and Hugging Face `tokenizer.json` files (byte-level BPE
// with a regex pre-tokenizer as GPT-2 / Llama 3 / SmolLM2 ship it, SentencePiece-style BPE with
// byte fallback as Llama 2 / TinyLlama ship it), with their added and special tokens.
//
// The data pipeline, `generate` and the checkpoint writer depend only on this header; the
// implementations live in src/text/*.cpp.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace lt::text {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Ids for `text`, as Hugging Face `tokenizers`' Tokenizer.encode(text, add_special_tokens)
  // gives them: added tokens matched first, then normalizer, pre-tokenizer, model; with
  // add_special the post-processor's tokens (e.g. BOS) are added too. Bytes that are not valid
  // UTF-8 are read as U+FFFD, as Python's errors="replace" reads them. Safe to call from several
  // threads at once.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special) const = 0;
  // Text for `ids` (as tokenizers' decode(ids, skip_special_tokens)). Ids outside the vocabulary
  // are an lt::Error naming the id.
  virtual std::string decode(std::span<const int32_t> ids, bool skip_special) const = 0;

  // One past the largest id (the model's embedding table must have at least this many rows).
  virtual int64_t vocab_size() const = 0;
  // The id of a token's exact text (vocabulary or added token), if there is one.
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;

  // Special tokens the data pipeline and `generate` use; nullopt when the tokenizer has none.
  virtual std::optional<int32_t> bos_id() const = 0;
  virtual std::optional<int32_t> eos_id() const = 0;

  // "bytes", "bpe-bytelevel", "bpe-sentencepiece", "bpe", "wordpiece": for messages and the run's description line.
  virtual std::string kind() const = 0;
};

// The byte tokenizer: id = byte value (0..255), no special tokens; decode is the identity.
std::unique_ptr<Tokenizer> byte_tokenizer();

// A Hugging Face tokenizer.json (with tokenizer_config.json beside it, when present, for
// bos/eos, and add_bos_token / add_eos_token, which then decide what encode(add_special) adds).
// Unsupported components (another model type, normalizer, pre-tokenizer or decoder) are an
// lt::Error naming the component and the file; docs/user-guide.md (Tokenizers) lists what is read.
std::unique_ptr<Tokenizer> load_tokenizer_json(const std::string& path);

}  // namespace lt::text
