// The tokenizers' regular expressions, on PCRE2 (UTF + Unicode properties, JIT when available).
//
// tokenizers compiles its patterns with Oniguruma (Ruby syntax). The patterns tokenizer.json files
// carry (GPT-2's, Llama 3's, Qwen2's) mean the same in PCRE2 with two adjustments made here:
//  - `\s` / `\S` become `\p{White_Space}` / `\P{White_Space}`: Oniguruma's \s is the Unicode
//    White_Space property, PCRE2's also takes U+180E;
//  - `^` and `$` match at line breaks (PCRE2_MULTILINE), as Ruby's always do.
// Matches are found as Oniguruma's find_iter finds them, empty matches included.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace lt::text {

// A span of text, and whether the pattern matched it (the rest of the text lies between matches).
struct Span {
  size_t begin = 0, end = 0;
  bool is_match = false;
};

class Regex {
 public:
  // `pattern` in tokenizers' syntax, or a literal string (`literal`). An invalid pattern is an
  // lt::Error naming `what` (e.g. "tokenizer F: pre_tokenizer.pattern").
  Regex(const std::string& pattern, bool literal, const std::string& what);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Each match as [begin, end) byte offsets, left to right (text must be valid UTF-8).
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;
  // tokenizers' Pattern::find_matches: the matches and the gaps between them, covering the text
  // (one non-match span for empty text); `invert` swaps the flags (Split's invert).
  std::vector<Span> spans(std::string_view text, bool invert = false) const;
  // Whether the whole of `text` matches (anchored at both ends).
  bool matches_whole(std::string_view text) const;

 private:
  void* code_ = nullptr;  // pcre2_code_8
  std::string what_;
};

// Single characters tested against Unicode properties through PCRE2 (no tables of our own).
bool is_white_space(std::string_view ch);  // White_Space, as Rust's char::is_whitespace and \s
bool is_word_char(std::string_view ch);    // Rust regex's Unicode \w

}  // namespace lt::text
