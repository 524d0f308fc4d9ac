#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/regex.h"

#include <pcre2.h>

#include "leantrain/error.h"
#include "text/json_read.h"
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
    // A pattern that backtracks without end fails after this many steps, with one error.
    if (context) pcre2_set_match_limit(context, 1000000);
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

// One pcre2_match from `start`; false when there is no match. With PCRE2_PARTIAL_HARD in
// `options`, *partial says whether the matcher reached the end of `text` (more text could change
// the answer).
bool match_at(const pcre2_code* code, std::string_view text, size_t start, uint32_t options, size_t& b, size_t& e,
              const std::string& what, bool* partial = nullptr) {
  MatchScratch& s = scratch();
  const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), start,
                             options | PCRE2_NO_UTF_CHECK, s.data, s.context);
  if (partial) *partial = rc == PCRE2_ERROR_PARTIAL;
  if (rc == PCRE2_ERROR_NOMATCH || rc == PCRE2_ERROR_PARTIAL) return false;
  // rc == 0: the match has more groups than the one-pair match data holds; group 0 is still set.
  if (rc < 0)
    lt::fail(what, "the regular expression failed on the text: " + pcre2_message(rc),
             "use a simpler pattern, or split the text into shorter pieces");
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.data);
  b = ov[0];
  e = ov[1];
  return true;
}

// Note [Bounded regex work]. A pattern such as `\w*[xy]|.` rescans the rest of a word at every
// position: quadratic time, hours for one long document. So each search sees a window of the text
// after its start, grown (doubled) while the matcher runs into the window's end (PCRE2's hard
// partial match says so); a match found without touching the end is the one the whole text gives.
// The bytes searched are counted against a budget linear in the text's length; a pattern over it
// is an error instead of a hang. Tokenizers' usual patterns search about one token ahead.
constexpr size_t kFirstWindow = 256;  // bytes; few pre-tokens cross it
constexpr size_t kPassesAllowed = 16;  // the budget: this many bytes searched per byte of text ...
constexpr size_t kBudgetBase = 1 << 20;  // ... plus this many

class MatchBudget {
 public:
  MatchBudget(size_t text_bytes, const std::string& what)
      : left_(kPassesAllowed * text_bytes + kBudgetBase), text_bytes_(text_bytes), what_(what) {}
  void spend(size_t bytes) {
    if (bytes <= left_) {
      left_ -= bytes;
      return;
    }
    lt::fail(what_, "the regular expression rescans the text: on a text of " + std::to_string(text_bytes_) +
                        " bytes it needed more than " + std::to_string(kPassesAllowed) +
                        " passes over it (its time grows with the square of the length)",
             "use a pattern that does not search far ahead at every position (e.g. \\w*[xy]|.), or split the text into "
             "shorter documents");
  }

 private:
  size_t left_, text_bytes_;
  const std::string& what_;
};

// The first match at or after `pos`, as matching the whole text finds it, searching a growing
// window of it (Note [Bounded regex work]).
bool match_windowed(const pcre2_code* code, std::string_view text, size_t pos, size_t& b, size_t& e,
                    const std::string& what, MatchBudget& budget) {
  for (size_t window = kFirstWindow;; window *= 2) {
    size_t end = window >= text.size() - pos ? text.size() : pos + window;
    while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) ++end;  // whole characters
    const bool whole = end == text.size();
    bool partial = false;
    const bool found = match_at(code, text.substr(0, end), pos, whole ? 0 : PCRE2_PARTIAL_HARD, b, e, what, &partial);
    // A search that ended inside the window is charged for what it matched, one that ran into the
    // window's end (and is repeated on a larger one) for the whole window.
    budget.spend(found ? e - pos + 1 : end - pos);
    if (found) return true;
    if (whole) return false;  // no match anywhere after pos
  }
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
    lt::fail(what, "the regular expression '" + printable(pattern) + "' does not compile: " + pcre2_message(err) +
                       " (at offset " + std::to_string(offset) + ")",
             "fix the pattern; leantrain reads it with PCRE2");
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE | PCRE2_JIT_PARTIAL_HARD);  // when the JIT is missing, pcre2_match interprets
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
  MatchBudget budget(text.size(), what_);
  while (pos <= text.size()) {
    size_t b = 0, e = 0;
    if (!match_windowed(code, text, pos, b, e, what_, budget)) break;
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
