// Small Tokenizer implementations for the data and generate tests, with special tokens placed
// as real tokenizers place them (the byte tokenizer has none).
#pragma once
#include <map>
#include <string>

#include "text/tokenizer.h"

namespace lt::test {

// Characters as ids byte + 3; 1 is BOS, 2 is EOS (0 unused). encode(add_special) puts BOS first
// (when `bos`), and EOS last when `post_eos` (a post-processor template "<s> $A </s>").
class CharTokenizer : public text::Tokenizer {
 public:
  explicit CharTokenizer(bool bos = true, bool eos = true, bool post_eos = false, std::string kind = "fake-chars")
      : bos_(bos), eos_(eos), post_eos_(post_eos), kind_(std::move(kind)) {}
  std::vector<int32_t> encode(std::string_view text, bool add_special) const override {
    std::vector<int32_t> ids;
    if (add_special && bos_) ids.push_back(1);
    for (unsigned char c : text) ids.push_back(int32_t(c) + 3);
    if (add_special && post_eos_) ids.push_back(2);
    return ids;
  }
  std::string decode(std::span<const int32_t> ids, bool skip_special) const override {
    std::string s;
    for (int32_t id : ids) {
      if (id < 3) {
        if (!skip_special) s += id == 1 ? "<s>" : "</s>";
        continue;
      }
      s.push_back(char(id - 3));
    }
    return s;
  }
  int64_t vocab_size() const override { return 259; }
  std::optional<int32_t> token_to_id(std::string_view) const override { return std::nullopt; }
  std::optional<int32_t> bos_id() const override { return bos_ ? std::optional<int32_t>(1) : std::nullopt; }
  std::optional<int32_t> eos_id() const override { return eos_ ? std::optional<int32_t>(2) : std::nullopt; }
  std::string kind() const override { return kind_; }

 private:
  bool bos_, eos_, post_eos_;
  std::string kind_;
};

// A fixed list of pieces decoded as SentencePiece-style tokenizers decode: "▁" is a space, the
// first leading space of the text is dropped, and an incomplete UTF-8 character at the end
// becomes U+FFFD. Id 0 is EOS. encode is not needed by its tests.
class PieceTokenizer : public text::Tokenizer {
 public:
  explicit PieceTokenizer(std::vector<std::string> pieces) : pieces_(std::move(pieces)) {}
  std::vector<int32_t> encode(std::string_view, bool) const override { return {}; }
  std::string decode(std::span<const int32_t> ids, bool skip_special) const override {
    std::string s;
    for (int32_t id : ids) {
      if (id == 0 && skip_special) continue;
      std::string p = pieces_.at(size_t(id));
      for (size_t k; (k = p.find("\xE2\x96\x81")) != std::string::npos;) p.replace(k, 3, " ");
      s += p;
    }
    if (!s.empty() && s[0] == ' ') s.erase(0, 1);
    // An unfinished multi-byte character at the end: U+FFFD, as a lossy UTF-8 decode gives.
    size_t lead = s.size();
    while (lead > 0 && (uint8_t(s[lead - 1]) & 0xC0) == 0x80) --lead;
    if (lead > 0 && uint8_t(s[lead - 1]) >= 0xC0) {
      const uint8_t c = uint8_t(s[lead - 1]);
      const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
      if (s.size() - (lead - 1) < need) s.replace(lead - 1, std::string::npos, "\xEF\xBF\xBD");
    }
    return s;
  }
  int64_t vocab_size() const override { return int64_t(pieces_.size()); }
  std::optional<int32_t> token_to_id(std::string_view) const override { return std::nullopt; }
  std::optional<int32_t> bos_id() const override { return std::nullopt; }
  std::optional<int32_t> eos_id() const override { return 0; }
  std::string kind() const override { return "fake-pieces"; }

 private:
  std::vector<std::string> pieces_;
};

}  // namespace lt::test
