#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/regex.h"

#include <pcre2.h>

#include "leantrain/error.h"
#include "text/utf8.h"

namespace lt::text {

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

// Oniguruma's \s is White_Space; PCRE2's adds U+180E. Rewrites \s and \S, in and out of classes.
std::string onig_to_pcre2(const std::string& p) {
  std::string out;
  out.reserve(p.size() + 16);
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '\\' && i + 1 < p.size()) {
      const char c = p[i + 1];
      if (c == 's') out += "\\p{White_Space}";
      else if (c == 'S') out += "\\P{White_Space}";
      else out.append(p, i, 2);
      ++i;
    } else {
      out += p[i];
    }
  }
  return out;
}

// Per-thread match data and JIT stack: encode may run on several loader threads at once.
struct MatchScratch {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, nullptr);
  MatchScratch() {
    if (context && jit_stack) pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~MatchScratch() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

MatchScratch& scratch() {
  thread_local MatchScratch s;
  LT_ASSERT(s.data && s.context);
  return s;
}

// One pcre2_match from `start`; false when there is no match.
bool match_at(const pcre2_code* code, std::string_view text, size_t start, uint32_t options, size_t& b, size_t& e,
              const std::string& what) {
  MatchScratch& s = scratch();
  const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), start,
                             options | PCRE2_NO_UTF_CHECK, s.data, s.context);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  // rc == 0: the match has more groups than the one-pair match data holds; group 0 is still set.
  if (rc < 0)
    lt::fail(what, "the regular expression failed on the text: " + pcre2_message(rc),
             "use a simpler pattern, or split the text into shorter pieces");
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.data);
  b = ov[0];
  e = ov[1];
  return true;
}

}  // namespace

Regex::Regex(const std::string& pattern, bool literal, const std::string& what) : what_(what) {
  const std::string p = literal ? pattern : onig_to_pcre2(pattern);
  const uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK | (literal ? PCRE2_LITERAL : PCRE2_MULTILINE);
  if (!is_valid_utf8(pattern)) lt::fail(what, "the pattern is not valid UTF-8", "");
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(), options, &err, &offset, nullptr);
  if (!code)
    lt::fail(what, "the regular expression '" + pattern + "' does not compile: " + pcre2_message(err) +
                       " (at offset " + std::to_string(offset) + ")",
             "fix the pattern; leantrain reads it with PCRE2");
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // when the JIT is missing, pcre2_match interprets
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  const auto* code = static_cast<const pcre2_code*>(code_);
  std::vector<std::pair<size_t, size_t>> out;
  // As Oniguruma's FindMatches: an empty match right where the previous match ended is skipped
  // by moving one character on.
  size_t pos = 0;
  bool have_last = false;
  size_t last_end = 0;
  while (pos <= text.size()) {
    size_t b = 0, e = 0;
    if (!match_at(code, text, pos, 0, b, e, what_)) break;
    if (b == e && have_last && last_end == e) {
      pos += pos < text.size() ? utf8_char_len(static_cast<unsigned char>(text[pos])) : 1;
      continue;
    }
    pos = e;
    have_last = true;
    last_end = e;
    out.emplace_back(b, e);
  }
  return out;
}

std::vector<Span> Regex::spans(std::string_view text, bool invert) const {
  std::vector<Span> out;
  if (text.empty()) {
    out.push_back({0, 0, invert});
    return out;
  }
  size_t prev = 0;
  for (auto [b, e] : find_all(text)) {
    if (prev != b) out.push_back({prev, b, invert});
    out.push_back({b, e, !invert});
    prev = e;
  }
  if (prev != text.size()) out.push_back({prev, text.size(), invert});
  return out;
}

bool Regex::matches_whole(std::string_view text) const {
  size_t b = 0, e = 0;
  return match_at(static_cast<const pcre2_code*>(code_), text, 0, PCRE2_ANCHORED | PCRE2_ENDANCHORED, b, e, what_);
}

bool is_white_space(std::string_view ch) {
  static const Regex re("[\\p{White_Space}]", false, "tokenizer white space class");
  return re.matches_whole(ch);
}

bool is_word_char(std::string_view ch) {
  // Rust regex's Unicode \w (UTS #18 Annex C), which tokenizers' single_word added tokens use.
  static const Regex re("[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}]", false, "tokenizer word class");
  return re.matches_whole(ch);
}

}  // namespace lt::text
