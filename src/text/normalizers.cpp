#include "text/normalizers.h"

#include <vector>

#include "text/pattern.h"

namespace lt::text {

namespace {

constexpr const char* kSupported = "normalizers Sequence, Prepend, Replace";

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

}  // namespace

std::unique_ptr<Normalizer> read_normalizer(const Json& j, const std::string& where, const JsonReader& r) {
  const std::string type = r.type(j, where);
  if (type == "Sequence") {
    auto n = std::make_unique<SequenceNormalizer>();
    const std::string w = field(where, "normalizers");
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
  if (type == "NFC" || type == "NFKC" || type == "NFD" || type == "NFKD")
    r.fail(where, "type '" + type + "' (Unicode normalization) is not supported: leantrain has no Unicode "
                  "normalization tables (it links no ICU)",
           std::string("use a tokenizer without it, or normalize the text beforehand; ") + kTokenizerDocs);
  r.unsupported(where, type, kSupported);
}

}  // namespace lt::text
