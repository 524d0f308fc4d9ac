// A tokenizer.json "model": what turns one pre-tokenized word into ids (BPE, WordPiece), and the
// vocabulary the rest of the pipeline (added tokens, decode) looks tokens up in.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lt::text {

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
