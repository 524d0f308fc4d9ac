#include "text/decoders.h"

#include "text/byte_level.h"
#include "text/pattern.h"
#include "text/pre_tokenizers.h"
#include "text/utf8.h"

namespace lt::text {

namespace {

constexpr const char* kSupportedDecoders = "decoders ByteLevel, Metaspace, WordPiece, Replace, ByteFallback, Fuse, Strip, Sequence";

class SequenceDecoder : public Decoder {
 public:
  std::vector<std::unique_ptr<Decoder>> parts;
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& d : parts) d->decode_chain(tokens);
  }
};

// Characters back to bytes (a token with a character outside the table keeps its own UTF-8
// bytes, e.g. an added token), all tokens joined, then read as UTF-8 with U+FFFD for bad bytes.
class ByteLevelDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens)
      if (!chars_to_bytes(t, bytes)) bytes += t;
    tokens.assign(1, to_valid_utf8(bytes));
  }
};

class ReplaceDecoder : public Decoder {
 public:
  std::unique_ptr<Pattern> pattern;
  std::string content;
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      std::string out;
      for (const Span& s : pattern->spans(t)) {
        if (s.is_match) out += content;
        else out.append(t, s.begin, s.end - s.begin);
      }
      t = std::move(out);
    }
  }
};

// Runs of <0xXX> tokens become their bytes when those form valid UTF-8, else one U+FFFD each.
class ByteFallbackDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string run;
    size_t run_len = 0;
    auto flush = [&] {
      if (run_len == 0) return;
      if (is_valid_utf8(run)) {
        out.push_back(run);
      } else {
        for (size_t k = 0; k < run_len; ++k) out.emplace_back(kReplacementChar);
      }
      run.clear();
      run_len = 0;
    };
    for (std::string& t : tokens) {
      int byte = -1;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') byte = parse_hex_byte(t.substr(3, 2));
      if (byte >= 0) {
        run += char(byte);
        ++run_len;
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens = std::move(out);
  }

 private:
  // Rust's u8::from_str_radix(s, 16): hex digits of either case, an optional leading '+'.
  static int parse_hex_byte(const std::string& s) {
    size_t i = s[0] == '+' ? 1 : 0;
    if (i == s.size()) return -1;
    int v = 0;
    for (; i < s.size(); ++i) {
      const char c = s[i];
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) return -1;
      v = v * 16 + d;
    }
    return v;
  }
};

class FuseDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

// Removes up to `start` leading and `stop` trailing `content` characters from every token.
class StripDecoder : public Decoder {
 public:
  std::string content;
  size_t start = 0, stop = 0;
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      size_t b = 0, e = t.size();
      for (size_t k = 0; k < start && t.compare(b, content.size(), content) == 0 && b < e; ++k) b += content.size();
      for (size_t k = 0; k < stop && e >= b + content.size() && t.compare(e - content.size(), content.size(), content) == 0; ++k)
        e -= content.size();
      t = t.substr(b, e - b);
    }
  }
};

// The replacement character becomes a space, except in the first token (unless prepend_scheme
// is "never"), where every one is dropped.
class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceSettings m;
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      const bool drop = i == 0 && m.scheme != PrependScheme::Never;
      std::string out;
      for (const Span& s : literal_spans(tokens[i], m.replacement)) {
        if (!s.is_match) out.append(tokens[i], s.begin, s.end - s.begin);
        else if (!drop) out += ' ';
      }
      tokens[i] = std::move(out);
    }
  }
};

// Every occurrence of `from` in s replaced by `to`, left to right (Rust's str::replace).
std::string replace_all(const std::string& s, std::string_view from, std::string_view to) {
  std::string out;
  size_t at = 0;
  for (size_t hit = s.find(from); hit != std::string::npos; hit = s.find(from, at)) {
    out.append(s, at, hit - at);
    out += to;
    at = hit + from.size();
  }
  out.append(s, at, std::string::npos);
  return out;
}

// tokenizers' WordPiece decoder: a token after the first loses its "##" or gets a space before it;
// cleanup then undoes BERT's spacing of punctuation and English contractions, token by token.
class WordPieceDecoder : public Decoder {
 public:
  std::string prefix = "##";
  bool cleanup = true;
  void decode_chain(std::vector<std::string>& tokens) const override {
    static const std::pair<const char*, const char*> kCleanup[] = {
        {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
        {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      if (i > 0) t = t.compare(0, prefix.size(), prefix) == 0 ? t.substr(prefix.size()) : " " + t;
      if (cleanup)
        for (auto [from, to] : kCleanup) t = replace_all(t, from, to);
    }
  }
};

}  // namespace

std::unique_ptr<Decoder> read_decoder(const Json& j, const std::string& where, const JsonReader& r) {
  const std::string type = r.type(j, where);
  if (type == "Sequence") {
    auto d = std::make_unique<SequenceDecoder>();
    const std::string w = field(where, "decoders");
    const JsonReader::Nesting nesting(r, w);
    const Json& parts = r.array(r.required(j, where, "decoders"), w);
    for (size_t i = 0; i < parts.size(); ++i) d->parts.push_back(read_decoder(parts[i], item(w, i), r));
    return d;
  }
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "WordPiece") {
    auto d = std::make_unique<WordPieceDecoder>();
    if (const Json* p = r.optional(j, where, "prefix")) d->prefix = r.string(*p, field(where, "prefix"));
    d->cleanup = r.bool_or(j, where, "cleanup", true);
    return d;
  }
  if (type == "Replace") {
    auto d = std::make_unique<ReplaceDecoder>();
    d->pattern = Pattern::read(r.required(j, where, "pattern"), field(where, "pattern"), r);
    d->content = r.string(r.required(j, where, "content"), field(where, "content"));
    return d;
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    auto d = std::make_unique<StripDecoder>();
    d->content = r.one_char(r.required(j, where, "content"), field(where, "content"));
    d->start = size_t(r.integer(r.required(j, where, "start"), field(where, "start"), 0, 1 << 20));
    d->stop = size_t(r.integer(r.required(j, where, "stop"), field(where, "stop"), 0, 1 << 20));
    return d;
  }
  if (type == "Metaspace") {
    auto d = std::make_unique<MetaspaceDecoder>();
    d->m = read_metaspace(j, where, r);
    return d;
  }
  r.unsupported(where, type, kSupportedDecoders);
}

}  // namespace lt::text
