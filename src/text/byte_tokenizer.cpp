// The 256-id byte tokenizer of the byte-level models (gpt2-tiny on fortunes, any text file).
#include "leantrain/error.h"
#include "text/tokenizer.h"

namespace lt::text {

namespace {

class ByteTokenizer : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text, bool) const override {
    std::vector<int32_t> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
    return ids;
  }
  std::string decode(std::span<const int32_t> ids, bool) const override {
    std::string s(ids.size(), '\0');
    for (size_t i = 0; i < ids.size(); ++i) {
      LT_CHECK(ids[i] >= 0 && ids[i] < 256, "token id " + std::to_string(ids[i]),
               "the byte tokenizer has ids 0..255", "decode ids the model produced");
      s[i] = static_cast<char>(ids[i]);
    }
    return s;
  }
  int64_t vocab_size() const override { return 256; }
  std::optional<int32_t> token_to_id(std::string_view token) const override {
    if (token.size() == 1) return static_cast<unsigned char>(token[0]);
    return std::nullopt;
  }
  std::optional<int32_t> bos_id() const override { return std::nullopt; }
  std::optional<int32_t> eos_id() const override { return std::nullopt; }
  std::string kind() const override { return "bytes"; }
};

}  // namespace

std::unique_ptr<Tokenizer> byte_tokenizer() { return std::make_unique<ByteTokenizer>(); }

}  // namespace lt::text
