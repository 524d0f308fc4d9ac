#include "text/wordpiece_model.h"

#include "text/utf8.h"

namespace lt::text {

std::unique_ptr<WordPieceModel> WordPieceModel::read(const Json& j, const std::string& where, const JsonReader& r) {
  auto m = std::make_unique<WordPieceModel>();
  const std::string wv = field(where, "vocab");
  read_vocab(r.object(r.required(j, where, "vocab"), wv), wv, r, m->vocab_, m->tokens_, m->has_token_);
  const std::string unk = r.string(r.required(j, where, "unk_token"), field(where, "unk_token"));
  auto u = m->vocab_.find(unk);
  if (u == m->vocab_.end()) r.fail(field(where, "unk_token"), "'" + unk + "' is not in the vocabulary");
  m->unk_id_ = u->second;
  if (const Json* p = r.optional(j, where, "continuing_subword_prefix"))
    m->prefix_ = r.string(*p, field(where, "continuing_subword_prefix"));
  if (const Json* c = r.optional(j, where, "max_input_chars_per_word"))
    m->max_chars_ = size_t(r.integer(*c, field(where, "max_input_chars_per_word"), 0, int64_t(1) << 30));
  return m;
}

void WordPieceModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (utf8_count(word) > max_chars_) {
    out.push_back(unk_id_);
    return;
  }
  const size_t first = out.size();
  std::string piece;
  for (size_t start = 0; start < word.size();) {
    // The longest piece word[start, end) in the vocabulary, ends on character boundaries.
    size_t end = word.size();
    int32_t found = -1;
    while (start < end) {
      piece.assign(start > 0 ? prefix_ : std::string());
      piece.append(word.substr(start, end - start));
      if (auto it = vocab_.find(std::string_view(piece)); it != vocab_.end()) {
        found = it->second;
        break;
      }
      do --end;  // back over the last character (continuation bytes are 10xxxxxx)
      while (end > start && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80);
    }
    if (found < 0) {  // a part that matches nothing: the whole word is unknown
      out.resize(first);
      out.push_back(unk_id_);
      return;
    }
    out.push_back(found);
    start = end;
  }
}

std::optional<int32_t> WordPieceModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* WordPieceModel::id_to_token(int32_t id) const {
  if (id < 0 || size_t(id) >= tokens_.size() || !has_token_[size_t(id)]) return nullptr;
  return &tokens_[size_t(id)];
}

}  // namespace lt::text
