#include "text/pre_tokenizers.h"

#include <cstring>

#include "text/byte_level.h"
#include "text/pattern.h"
#include "text/regex.h"
#include "text/unicode_icu.h"
#include "text/utf8.h"

namespace lt::text {

namespace {

constexpr const char* kSupportedPreTokenizers = "pre-tokenizers ByteLevel, Split, Digits, Metaspace, BertPreTokenizer, Sequence";

// GPT-2's pre-tokenizer regex, as tokenizers' ByteLevel has it built in.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class SequencePreTokenizer : public PreTokenizer {
 public:
  std::vector<std::unique_ptr<PreTokenizer>> parts;
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    for (const auto& p : parts) p->pre_tokenize(pieces);
  }
  bool has(const char* type) const override {
    for (const auto& p : parts)
      if (p->has(type)) return true;
    return false;
  }
};

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  bool add_prefix_space = false;
  bool use_regex = true;
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    static const Regex gpt2(kGpt2Pattern, false, "tokenizer ByteLevel pattern");
    split_each(pieces, [&](const Piece& in, std::vector<Piece>& out) {
      Piece p = in;
      if (add_prefix_space && !p.text.empty() && p.text[0] != ' ') prepend_text(p, " ");
      if (use_regex) split_piece(p, gpt2.spans(p.text), SplitBehavior::Isolated, out);
      else out.push_back(std::move(p));
    });
    // Then every byte becomes its character; all of a character's bytes keep its alignment.
    const ByteLevelTable& t = byte_level_table();
    for (Piece& p : pieces) {
      if (p.id >= 0) continue;
      size_t from_start = 0;
      for (size_t i = 0; i < p.from_start; ++i) from_start += t.byte_to_utf8[static_cast<unsigned char>(p.text[i])].size();
      p.text = bytes_to_chars(p.text);
      p.from_start = from_start;
    }
  }
  bool has(const char* type) const override { return std::strcmp(type, "ByteLevel") == 0; }
};

class SplitPreTokenizer : public PreTokenizer {
 public:
  std::unique_ptr<Pattern> pattern;
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    split_each(pieces, [&](const Piece& p, std::vector<Piece>& out) {
      split_piece(p, pattern->spans(p.text, invert), behavior, out);
    });
  }
  bool has(const char* type) const override { return std::strcmp(type, "Split") == 0; }
};

class DigitsPreTokenizer : public PreTokenizer {
 public:
  bool individual_digits = false;
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    // Rust's char::is_numeric: the general categories Nd, Nl, No; one match per character.
    static const Regex numeric("\\p{N}", false, "tokenizer Digits class");
    const SplitBehavior b = individual_digits ? SplitBehavior::Isolated : SplitBehavior::Contiguous;
    split_each(pieces, [&](const Piece& p, std::vector<Piece>& out) { split_piece(p, numeric.spans(p.text), b, out); });
  }
  bool has(const char* type) const override { return std::strcmp(type, "Digits") == 0; }
};

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  std::string replacement;
  PrependScheme scheme = PrependScheme::Always;
  bool split = true;

  void pre_tokenize(std::vector<Piece>& pieces) const override {
    split_each(pieces, [&](const Piece& in, std::vector<Piece>& out) {
      Piece p = in;
      replace_spans(p, literal_spans(p.text, " "), replacement);
      const bool starts = p.text.compare(0, replacement.size(), replacement) == 0;
      // "first": only the piece that starts at the input's offset 0.
      if (!starts && (scheme == PrependScheme::Always || (scheme == PrependScheme::First && p.from_start > 0)))
        prepend_text(p, replacement);
      if (split) split_piece(p, literal_spans(p.text, replacement), SplitBehavior::MergedWithNext, out);
      else out.push_back(std::move(p));
    });
  }
  bool has(const char* type) const override { return std::strcmp(type, "Metaspace") == 0; }
};

// Spans covering `text`: every character for which pred holds is a match of its own (tokenizers'
// split with a char predicate), the runs between them are not.
template <class Pred>
std::vector<Span> char_spans(std::string_view text, Pred pred) {
  std::vector<Span> spans;
  size_t run = 0;
  for (size_t i = 0; i < text.size();) {
    const size_t n = utf8_char_len(static_cast<unsigned char>(text[i]));
    if (pred(utf8_decode_at(text, i))) {
      if (run < i) spans.push_back({run, i, false});
      spans.push_back({i, i + n, true});
      run = i + n;
    }
    i += n;
  }
  if (run < text.size()) spans.push_back({run, text.size(), false});
  return spans;
}

// tokenizers' BertPreTokenizer: split on whitespace (removed), then every punctuation character
// (ASCII punctuation or a Unicode P* category) on its own.
class BertPreTokenizer : public PreTokenizer {
 public:
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    auto space = [](char32_t c) { return c < 0x80 ? (c == ' ' || (c >= 9 && c <= 13)) : unicode::is_white_space(c); };
    auto punct = [](char32_t c) {
      if (c < 0x80) return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
      return unicode::is_punctuation(c);
    };
    split_each(pieces, [&](const Piece& p, std::vector<Piece>& out) {
      split_piece(p, char_spans(p.text, space), SplitBehavior::Removed, out);
    });
    split_each(pieces, [&](const Piece& p, std::vector<Piece>& out) {
      split_piece(p, char_spans(p.text, punct), SplitBehavior::Isolated, out);
    });
  }
  bool has(const char* type) const override { return std::strcmp(type, "BertPreTokenizer") == 0; }
};

SplitBehavior read_behavior(const Json& j, const std::string& where, const JsonReader& r) {
  const std::string b = r.string(j, where);
  if (b == "Removed") return SplitBehavior::Removed;
  if (b == "Isolated") return SplitBehavior::Isolated;
  if (b == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (b == "Contiguous") return SplitBehavior::Contiguous;
  r.fail(where, "unknown behavior '" + b + "' (expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous)");
}

}  // namespace

MetaspaceSettings read_metaspace(const Json& j, const std::string& where, const JsonReader& r) {
  MetaspaceSettings m;
  m.replacement = r.one_char(r.required(j, where, "replacement"), field(where, "replacement"));
  const Json* scheme = r.optional(j, where, "prepend_scheme");
  if (scheme) {
    const std::string name = r.string(*scheme, field(where, "prepend_scheme"));
    if (name == "always") m.scheme = PrependScheme::Always;
    else if (name == "never") m.scheme = PrependScheme::Never;
    else if (name == "first") m.scheme = PrependScheme::First;
    else r.fail(field(where, "prepend_scheme"), "unknown value '" + name + "' (expected always, never or first)");
  }
  if (!r.bool_or(j, where, "add_prefix_space", true)) {
    if (m.scheme != PrependScheme::Never && scheme) r.fail(where, "add_prefix_space false does not match prepend_scheme");
    m.scheme = PrependScheme::Never;
  }
  m.split = r.bool_or(j, where, "split", true);
  return m;
}

std::unique_ptr<PreTokenizer> read_pre_tokenizer(const Json& j, const std::string& where, const JsonReader& r) {
  const std::string type = r.type(j, where);
  if (type == "Sequence") {
    auto p = std::make_unique<SequencePreTokenizer>();
    const std::string w = field(where, "pretokenizers");
    const JsonReader::Nesting nesting(r, w);
    const Json& parts = r.array(r.required(j, where, "pretokenizers"), w);
    for (size_t i = 0; i < parts.size(); ++i) p->parts.push_back(read_pre_tokenizer(parts[i], item(w, i), r));
    return p;
  }
  if (type == "ByteLevel") {
    auto p = std::make_unique<ByteLevelPreTokenizer>();
    p->add_prefix_space = r.bool_or(j, where, "add_prefix_space", true);
    p->use_regex = r.bool_or(j, where, "use_regex", true);
    return p;
  }
  if (type == "Split") {
    auto p = std::make_unique<SplitPreTokenizer>();
    p->pattern = Pattern::read(r.required(j, where, "pattern"), field(where, "pattern"), r);
    p->behavior = read_behavior(r.required(j, where, "behavior"), field(where, "behavior"), r);
    p->invert = r.bool_or(j, where, "invert", false);
    return p;
  }
  if (type == "Digits") {
    auto p = std::make_unique<DigitsPreTokenizer>();
    p->individual_digits = r.bool_or(j, where, "individual_digits", false);
    return p;
  }
  if (type == "BertPreTokenizer") {
    (void)unicode::icu_version();  // refuse the file now when ICU is missing
    return std::make_unique<BertPreTokenizer>();
  }
  if (type == "Metaspace") {
    auto p = std::make_unique<MetaspacePreTokenizer>();
    const MetaspaceSettings m = read_metaspace(j, where, r);
    p->replacement = m.replacement;
    p->scheme = m.scheme;
    p->split = m.split;
    return p;
  }
  r.unsupported(where, type, kSupportedPreTokenizers);
}

}  // namespace lt::text
