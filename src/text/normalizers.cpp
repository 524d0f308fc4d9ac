#include "text/normalizers.h"

#include <vector>

#include "text/pattern.h"
#include "text/unicode_icu.h"
#include "text/utf8.h"

namespace lt::text {

namespace {

constexpr const char* kSupportedNormalizers = "normalizers Sequence, Prepend, Replace, NFC, NFD, NFKC, NFKD, BertNormalizer, Lowercase, StripAccents";

class SequenceNormalizer : public Normalizer {
 public:
  std::vector<std::unique_ptr<Normalizer>> parts;
  void normalize(Piece& p) const override {
    for (const auto& n : parts) n->normalize(p);
  }
};

class PrependNormalizer : public Normalizer {
 public:
  std::string prefix;
  void normalize(Piece& p) const override { prepend_text(p, prefix); }
};

class ReplaceNormalizer : public Normalizer {
 public:
  std::unique_ptr<Pattern> pattern;
  std::string content;
  void normalize(Piece& p) const override { replace_spans(p, pattern->spans(p.text), content); }
};

// tokenizers' is_chinese_char: the CJK Unified Ideographs blocks (not Japanese or Korean scripts).
bool is_chinese_char(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// tokenizers' is_control: the unicode_categories crate's is_other, which is control, format and
// private use only (not unassigned, not surrogate).
bool is_other(int cat) {
  using namespace unicode;
  return cat == Control || cat == Format || cat == PrivateUse;
}

// The piece's text rebuilt by `f(c, out)` for each character; from_start (for Metaspace, which a
// BERT tokenizer does not have) stays on the first character that remains.
template <class F>
void map_chars(Piece& p, F&& f) {
  std::string out;
  out.reserve(p.text.size() + 8);
  for (size_t i = 0; i < p.text.size(); i += utf8_char_len(static_cast<unsigned char>(p.text[i])))
    f(utf8_decode_at(p.text, i), out);
  if (p.from_start) p.from_start = out.empty() ? 0 : utf8_char_len(static_cast<unsigned char>(out[0]));
  p.text = std::move(out);
}

void strip_accents(Piece& p) {
  p.text = unicode::nfd(p.text);
  map_chars(p, [](char32_t c, std::string& out) {
    if (unicode::category(c) != unicode::NonSpacingMark) utf8_append(out, c);
  });
}

void lowercase(Piece& p) {
  map_chars(p, [](char32_t c, std::string& out) {
    if (c < 0x80) out.push_back(c >= 'A' && c <= 'Z' ? char(c + 32) : char(c));
    else unicode::append_lowercase(out, c);
  });
}

// tokenizers' BertNormalizer: clean_text drops NUL, U+FFFD and "other" characters (control,
// format, private use; \t \n \r count as whitespace) and turns whitespace
// into spaces; handle_chinese_chars puts spaces around CJK ideographs; strip_accents (by default
// as lowercase) decomposes (NFD) and drops non-spacing marks; lowercase as Rust's char::to_lowercase.
class BertNormalizer : public Normalizer {
 public:
  bool clean_text = true, chinese = true, strip = true, lower = true;
  void normalize(Piece& p) const override {
    if (clean_text)
      map_chars(p, [](char32_t c, std::string& out) {
        if (c == '\t' || c == '\n' || c == '\r') return out.push_back(' ');
        if (c == 0 || c == 0xFFFD || is_other(unicode::category(c))) return;
        if (unicode::is_white_space(c)) return out.push_back(' ');
        utf8_append(out, c);
      });
    if (chinese)
      map_chars(p, [](char32_t c, std::string& out) {
        if (!is_chinese_char(c)) return utf8_append(out, c);
        out.push_back(' ');
        utf8_append(out, c);
        out.push_back(' ');
      });
    if (strip) strip_accents(p);
    if (lower) lowercase(p);
  }
};

// NFC, NFD, NFKC, NFKD (Qwen2's tokenizer reads NFC), through ICU.
class UnicodeFormNormalizer : public Normalizer {
 public:
  unicode::Form form = unicode::Form::NFC;
  void normalize(Piece& p) const override {
    p.text = unicode::normalize(p.text, form);
    if (p.from_start) p.from_start = p.text.empty() ? 0 : utf8_char_len(static_cast<unsigned char>(p.text[0]));
  }
};

class LowercaseNormalizer : public Normalizer {
 public:
  void normalize(Piece& p) const override { lowercase(p); }
};

class StripAccentsNormalizer : public Normalizer {
 public:
  void normalize(Piece& p) const override { strip_accents(p); }
};

}  // namespace

std::unique_ptr<Normalizer> read_normalizer(const Json& j, const std::string& where, const JsonReader& r) {
  const std::string type = r.type(j, where);
  if (type == "Sequence") {
    auto n = std::make_unique<SequenceNormalizer>();
    const std::string w = field(where, "normalizers");
    const JsonReader::Nesting nesting(r, w);
    const Json& parts = r.array(r.required(j, where, "normalizers"), w);
    for (size_t i = 0; i < parts.size(); ++i) n->parts.push_back(read_normalizer(parts[i], item(w, i), r));
    return n;
  }
  if (type == "Prepend") {
    auto n = std::make_unique<PrependNormalizer>();
    n->prefix = r.string(r.required(j, where, "prepend"), field(where, "prepend"));
    return n;
  }
  if (type == "Replace") {
    auto n = std::make_unique<ReplaceNormalizer>();
    n->pattern = Pattern::read(r.required(j, where, "pattern"), field(where, "pattern"), r);
    n->content = r.string(r.required(j, where, "content"), field(where, "content"));
    return n;
  }
  if (type == "BertNormalizer") {
    auto n = std::make_unique<BertNormalizer>();
    n->clean_text = r.bool_or(j, where, "clean_text", true);
    n->chinese = r.bool_or(j, where, "handle_chinese_chars", true);
    n->lower = r.bool_or(j, where, "lowercase", true);
    n->strip = n->lower;  // strip_accents null: as lowercase
    if (const Json* a = r.optional(j, where, "strip_accents")) n->strip = r.boolean(*a, field(where, "strip_accents"));
    (void)unicode::icu_version();  // refuse the file now, not at the first text, when ICU is missing
    return n;
  }
  if (type == "Lowercase") {
    (void)unicode::icu_version();
    return std::make_unique<LowercaseNormalizer>();
  }
  if (type == "StripAccents") {
    (void)unicode::icu_version();
    return std::make_unique<StripAccentsNormalizer>();
  }
  if (type == "NFC" || type == "NFKC" || type == "NFD" || type == "NFKD") {
    (void)unicode::icu_version();
    auto n = std::make_unique<UnicodeFormNormalizer>();
    n->form = type == "NFC" ? unicode::Form::NFC : type == "NFD" ? unicode::Form::NFD
            : type == "NFKC" ? unicode::Form::NFKC : unicode::Form::NFKD;
    return n;
  }
  r.unsupported(where, type, kSupportedNormalizers);
}

}  // namespace lt::text
