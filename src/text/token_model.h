// A tokenizer.json "model": what turns one pre-tokenized word into ids (BPE, WordPiece), and the
// vocabulary the rest of the pipeline (added tokens, decode) looks tokens up in.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/json_read.h"

namespace lt::text {

// Ids at most this large: a larger one would ask the model for an absurd embedding table.
inline constexpr int64_t kMaxTokenId = (int64_t(1) << 24) - 1;

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// A model's "vocab" object (token -> id, ids 0..kMaxTokenId, each once) read into `ids`, with the
// tokens by id and whether an id has one (ids may skip numbers). `where` names the field for errors.
void read_vocab(const Json& vocab, const std::string& where, const JsonReader& r, TokenMap& ids,
                std::vector<std::string>& tokens, std::vector<uint8_t>& has_token);

class TokenModel {
 public:
  virtual ~TokenModel() = default;
  // Appends the ids of one pre-tokenized word.
  virtual void tokenize(std::string_view word, std::vector<int32_t>& out) const = 0;
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  virtual const std::string* id_to_token(int32_t id) const = 0;  // nullptr when no token has this id
  virtual size_t entries() const = 0;    // tokenizers' get_vocab_size()
  virtual int64_t max_id() const = 0;
  virtual bool byte_fallback() const { return false; }
};

}  // namespace lt::text
