// tokenizer.json "added_tokens": tokens matched in the text before anything else, as tokenizers'
// AddedVocabulary does. Non-normalized ones are found in the raw text, normalized ones in each
// remaining piece after the normalizer ran; matching is leftmost-longest, with the single_word,
// lstrip and rstrip options. Special ones are dropped by decode(skip_special).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/bpe_model.h"
#include "text/token_model.h"
#include "text/json_read.h"
#include "text/pieces.h"

namespace lt::text {

class Normalizer;

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool single_word = false, lstrip = false, rstrip = false, normalized = true, special = false;
};

class AddedTokens {
 public:
  // Reads the array and checks each id is the one tokenizers would give the token (its
  // vocabulary id, else the next id past the vocabulary and the added tokens before it).
  void read(const Json& j, const std::string& where, const JsonReader& r, const TokenModel& model,
            const Normalizer* normalizer);

  // Splits the added tokens out of every plain piece: those with normalized == false when
  // `normalized` is false (on the raw text), the others when it is true.
  void split(std::vector<Piece>& pieces, bool normalized) const;

  const AddedToken* by_id(int32_t id) const;
  std::optional<int32_t> find(std::string_view content) const;
  bool is_special(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }
  int64_t max_id() const;

 private:
  // The patterns of one matching pass, grouped by first byte, longest first.
  struct Matcher {
    std::vector<std::vector<std::pair<std::string, int32_t>>> by_first_byte =
        std::vector<std::vector<std::pair<std::string, int32_t>>>(256);
    bool empty = true;
  };
  void split_piece(const Piece& p, const Matcher& m, std::vector<Piece>& out) const;

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  std::unordered_map<std::string, size_t> by_content_;
  Matcher raw_, normalized_;
};

}  // namespace lt::text
