// tokenizers' pattern fields ({"String": "..."} or {"Regex": "..."}), as Split, Replace (normalizer
// and decoder) read them: a literal is matched as plain text, a regex through text/regex.h.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "text/json_read.h"
#include "text/regex.h"

namespace lt::text {

class Pattern {
 public:
  static std::unique_ptr<Pattern> read(const Json& j, const std::string& where, const JsonReader& r);

  // tokenizers' Pattern::find_matches: matches and the gaps between them, covering the text.
  std::vector<Span> spans(std::string_view text, bool invert = false) const;

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;
};

}  // namespace lt::text
