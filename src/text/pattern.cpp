#include "text/pattern.h"

#include "text/pieces.h"

namespace lt::text {

std::unique_ptr<Pattern> Pattern::read(const Json& j, const std::string& where, const JsonReader& r) {
  r.object(j, where);
  auto p = std::make_unique<Pattern>();
  if (const Json* s = r.optional(j, where, "String")) {
    p->literal_ = r.string(*s, field(where, "String"));
    if (p->literal_.empty()) r.fail(field(where, "String"), "the pattern is empty");
  } else if (const Json* re = r.optional(j, where, "Regex")) {
    const std::string pattern = r.string(*re, field(where, "Regex"));
    p->regex_ = std::make_unique<Regex>(pattern, false, "tokenizer " + r.file() + ": " + field(where, "Regex"));
  } else {
    r.fail(where, "expected {\"String\": ...} or {\"Regex\": ...}");
  }
  return p;
}

std::vector<Span> Pattern::spans(std::string_view text, bool invert) const {
  if (regex_) return regex_->spans(text, invert);
  std::vector<Span> out = literal_spans(text, literal_);
  if (invert)
    for (Span& s : out) s.is_match = !s.is_match;
  return out;
}

}  // namespace lt::text
