#include "text/added_tokens.h"

#include <algorithm>

#include "text/normalizers.h"
#include "text/regex.h"
#include "text/utf8.h"

namespace lt::text {

namespace {

// The start of the last character of s (non-empty, valid UTF-8).
size_t last_char_start(std::string_view s) {
  size_t i = s.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  return i;
}

bool ends_with_word(std::string_view s) { return !s.empty() && is_word_char(s.substr(last_char_start(s))); }

bool starts_with_word(std::string_view s) {
  return !s.empty() && is_word_char(s.substr(0, utf8_char_len(static_cast<unsigned char>(s[0]))));
}

// Where the white space at the end of s begins (s.size() when there is none).
size_t trailing_space_start(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    const size_t start = last_char_start(s.substr(0, end));
    if (!is_white_space(s.substr(start, end - start))) break;
    end = start;
  }
  return end;
}

// The length of the white space at the start of s.
size_t leading_space_len(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const size_t len = utf8_char_len(static_cast<unsigned char>(s[i]));
    if (!is_white_space(s.substr(i, len))) break;
    i += len;
  }
  return i;
}

}  // namespace

void AddedTokens::read(const Json& j, const std::string& where, const JsonReader& r, const TokenModel& model,
                       const Normalizer* normalizer) {
  r.array(j, where);
  // tokenizers gives a token that is not in the vocabulary the next id past both the vocabulary
  // size (its entry count) and the added ids so far; the file's ids must agree with that.
  int64_t max_added = -1;
  for (size_t i = 0; i < j.size(); ++i) {
    const std::string w = item(where, i);
    const Json& t = r.object(j[i], w);
    AddedToken a;
    a.id = int32_t(r.integer(r.required(t, w, "id"), field(w, "id"), 0, kMaxTokenId));
    a.content = r.string(r.required(t, w, "content"), field(w, "content"));
    a.single_word = r.bool_or(t, w, "single_word", false);
    a.lstrip = r.bool_or(t, w, "lstrip", false);
    a.rstrip = r.bool_or(t, w, "rstrip", false);
    a.special = r.bool_or(t, w, "special", false);
    a.normalized = r.bool_or(t, w, "normalized", !a.special);
    if (a.content.empty()) r.fail(field(w, "content"), "is empty");
    if (by_content_.count(a.content)) r.fail(field(w, "content"), "'" + a.content + "' is listed twice");
    if (by_id_.count(a.id)) r.fail(field(w, "id"), "id " + std::to_string(a.id) + " is given to two added tokens");
    int64_t expected;
    if (auto v = model.token_to_id(a.content)) {
      expected = *v;
    } else {
      const int64_t size = int64_t(model.entries());
      expected = max_added < 0 ? size : (max_added >= size || size == 0) ? max_added + 1 : size;
    }
    if (a.id != expected)
      r.fail(field(w, "id"),
             "'" + a.content + "' has id " + std::to_string(a.id) + " but Hugging Face tokenizers gives it id " +
                 std::to_string(expected) + " (its vocabulary id, or the next id past the vocabulary)",
             "make the added token's id agree with the model's vocabulary");
    max_added = std::max(max_added, int64_t(a.id));
    by_id_[a.id] = tokens_.size();
    by_content_[a.content] = tokens_.size();
    tokens_.push_back(std::move(a));
  }
  // tokenizers' matching order: special tokens first, then the others (it matters only to which
  // of two equal patterns wins, and contents are unique here).
  for (const AddedToken& a : tokens_) {
    Matcher& m = a.normalized ? normalized_ : raw_;
    std::string pattern = a.content;
    if (a.normalized && normalizer) {
      Piece p{pattern, -1, 0};
      normalizer->normalize(p);
      pattern = p.text;
    }
    if (pattern.empty()) continue;
    m.by_first_byte[static_cast<unsigned char>(pattern[0])].emplace_back(pattern, a.id);
    m.empty = false;
  }
  for (Matcher* m : {&raw_, &normalized_})
    for (auto& bucket : m->by_first_byte)
      std::stable_sort(bucket.begin(), bucket.end(),
                       [](const auto& x, const auto& y) { return x.first.size() > y.first.size(); });
}

void AddedTokens::split(std::vector<Piece>& pieces, bool normalized) const {
  const Matcher& m = normalized ? normalized_ : raw_;
  if (m.empty) return;
  split_each(pieces, [&](const Piece& p, std::vector<Piece>& out) { split_piece(p, m, out); });
}

void AddedTokens::split_piece(const Piece& p, const Matcher& m, std::vector<Piece>& out) const {
  const std::string_view s = p.text;
  size_t start_offset = 0;  // end of the last token taken
  size_t pos = 0;           // where the search for the next match starts
  while (pos < s.size()) {
    // Leftmost-longest: the first position where a pattern matches, its longest pattern there.
    size_t begin = pos;
    const std::pair<std::string, int32_t>* hit = nullptr;
    for (; begin < s.size() && !hit; ++begin) {
      for (const auto& cand : m.by_first_byte[static_cast<unsigned char>(s[begin])])
        if (s.compare(begin, cand.first.size(), cand.first) == 0) {
          hit = &cand;
          break;
        }
      if (hit) break;
    }
    if (!hit) break;
    size_t start = begin, stop = begin + hit->first.size();
    pos = stop;  // the next search starts after this match, whether or not it is taken
    const AddedToken& a = tokens_[by_id_.at(hit->second)];
    if (a.single_word) {
      const bool start_space = start == 0 || !ends_with_word(s.substr(0, start));
      const bool stop_space = stop == s.size() || !starts_with_word(s.substr(stop));
      if (!start_space || !stop_space) continue;
    }
    if (a.lstrip) start = std::max(trailing_space_start(s.substr(0, start)), start_offset);
    if (a.rstrip) stop += leading_space_len(s.substr(stop));
    if (start_offset < start) out.push_back(slice(p, start_offset, start));
    Piece t = slice(p, start, stop);
    t.id = a.id;
    out.push_back(std::move(t));
    start_offset = stop;
  }
  if (start_offset < s.size()) out.push_back(slice(p, start_offset, s.size()));
}

const AddedToken* AddedTokens::by_id(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<int32_t> AddedTokens::find(std::string_view content) const {
  auto it = by_content_.find(std::string(content));
  if (it == by_content_.end()) return std::nullopt;
  return tokens_[it->second].id;
}

bool AddedTokens::is_special(std::string_view content) const {
  auto it = by_content_.find(std::string(content));
  return it != by_content_.end() && tokens_[it->second].special;
}

int64_t AddedTokens::max_id() const {
  int64_t m = -1;
  for (const AddedToken& a : tokens_) m = std::max(m, int64_t(a.id));
  return m;
}

}  // namespace lt::text
