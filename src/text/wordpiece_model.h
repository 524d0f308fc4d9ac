// tokenizer.json "model" of type WordPiece (BERT, DistilBERT): greedy longest-match-first over
// the vocabulary, word pieces after the first looked up with continuing_subword_prefix ("##"); a
// word with a part that matches nothing, or longer than max_input_chars_per_word characters, is
// the single unk_token (tokenizers' WordPiece::tokenize).
#pragma once
#include <memory>

#include "text/json_read.h"
#include "text/token_model.h"

namespace lt::text {

class WordPieceModel final : public TokenModel {
 public:
  static std::unique_ptr<WordPieceModel> read(const Json& j, const std::string& where, const JsonReader& r);
  void tokenize(std::string_view word, std::vector<int32_t>& out) const override;
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  const std::string* id_to_token(int32_t id) const override;
  size_t entries() const override { return vocab_.size(); }
  int64_t max_id() const override { return int64_t(tokens_.size()) - 1; }
  const std::string& prefix() const { return prefix_; }

 private:
  TokenMap vocab_;
  std::vector<std::string> tokens_;  // by id
  std::vector<uint8_t> has_token_;
  int32_t unk_id_ = 0;
  std::string prefix_ = "##";
  size_t max_chars_ = 100;
};

}  // namespace lt::text
