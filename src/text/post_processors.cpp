#include "text/post_processors.h"

#include "text/bpe_model.h"

namespace lt::text {

namespace {

constexpr const char* kSupportedPostProcessors = "post-processors TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel, Sequence";

class TemplateProcessor : public PostProcessor {
 public:
  std::vector<std::vector<int32_t>> before, after;  // special tokens' ids around $A, in order
  void add_special(std::vector<int32_t>& ids) const override {
    std::vector<int32_t> out;
    for (const auto& s : before) out.insert(out.end(), s.begin(), s.end());
    out.insert(out.end(), ids.begin(), ids.end());
    for (const auto& s : after) out.insert(out.end(), s.begin(), s.end());
    ids = std::move(out);
  }
  std::optional<int32_t> leading_special() const override {
    if (before.size() == 1 && before[0].size() == 1) return before[0][0];
    return std::nullopt;
  }
  std::optional<int32_t> trailing_special() const override {
    if (after.size() == 1 && after[0].size() == 1) return after[0][0];
    return std::nullopt;
  }
};

class NoIdsProcessor : public PostProcessor {  // ByteLevel: trims offsets, which leantrain has not
 public:
  void add_special(std::vector<int32_t>&) const override {}
};

class SequenceProcessor : public PostProcessor {
 public:
  std::vector<std::unique_ptr<PostProcessor>> parts;
  void add_special(std::vector<int32_t>& ids) const override {
    for (const auto& p : parts) p->add_special(ids);
  }
  std::optional<int32_t> leading_special() const override {
    for (const auto& p : parts)
      if (auto t = p->leading_special()) return t;
    return std::nullopt;
  }
  std::optional<int32_t> trailing_special() const override {
    for (const auto& p : parts)
      if (auto t = p->trailing_special()) return t;
    return std::nullopt;
  }
};

std::unique_ptr<PostProcessor> read_template(const Json& j, const std::string& where, const JsonReader& r) {
  auto t = std::make_unique<TemplateProcessor>();
  const std::string ws = field(where, "special_tokens");
  const Json& specials = r.object(r.required(j, where, "special_tokens"), ws);
  const std::string w = field(where, "single");
  const Json& single = r.array(r.required(j, where, "single"), w);
  bool seen_a = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const std::string wi = item(w, i);
    const Json& piece = r.object(single[i], wi);
    if (const Json* s = r.optional(piece, wi, "Sequence")) {
      const std::string id = r.string(r.required(*s, field(wi, "Sequence"), "id"), field(wi, "Sequence.id"));
      if (id != "A") r.fail(field(wi, "Sequence.id"), "the single-sequence template can only hold $A, found $" + id);
      if (seen_a) r.fail(wi, "$A appears twice");
      seen_a = true;
    } else if (const Json* s = r.optional(piece, wi, "SpecialToken")) {
      const std::string name = r.string(r.required(*s, field(wi, "SpecialToken"), "id"), field(wi, "SpecialToken.id"));
      const Json* tok = specials.contains(name) ? &specials[name] : nullptr;
      if (!tok) r.fail(field(wi, "SpecialToken.id"), "'" + name + "' is not in special_tokens");
      const std::string wt = ws + "['" + name + "']";
      const Json& ids = r.array(r.required(*tok, wt, "ids"), field(wt, "ids"));
      std::vector<int32_t> v;
      for (size_t k = 0; k < ids.size(); ++k) v.push_back(int32_t(r.integer(ids[k], item(field(wt, "ids"), k), 0, kMaxTokenId)));
      (seen_a ? t->after : t->before).push_back(std::move(v));
    } else {
      r.fail(wi, "expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
    }
  }
  if (!seen_a) r.fail(w, "the template has no $A");
  return t;
}

}  // namespace

std::unique_ptr<PostProcessor> read_post_processor(const Json& j, const std::string& where, const JsonReader& r) {
  const std::string type = r.type(j, where);
  if (type == "TemplateProcessing") return read_template(j, where, r);
  if (type == "BertProcessing" || type == "RobertaProcessing") {  // single text: cls $A sep
    auto t = std::make_unique<TemplateProcessor>();
    for (const char* key : {"cls", "sep"}) {
      const std::string w = field(where, key);
      const Json& pair = r.array(r.required(j, where, key), w);
      if (pair.size() != 2) r.fail(w, "expected [token, id]");
      (void)r.string(pair[0], item(w, 0));
      const int32_t id = int32_t(r.integer(pair[1], item(w, 1), 0, kMaxTokenId));
      (std::string(key) == "cls" ? t->before : t->after).push_back({id});
    }
    return t;
  }
  if (type == "ByteLevel") return std::make_unique<NoIdsProcessor>();
  if (type == "Sequence") {
    auto p = std::make_unique<SequenceProcessor>();
    const std::string w = field(where, "processors");
    const JsonReader::Nesting nesting(r, w);
    const Json& parts = r.array(r.required(j, where, "processors"), w);
    for (size_t i = 0; i < parts.size(); ++i) p->parts.push_back(read_post_processor(parts[i], item(w, i), r));
    return p;
  }
  r.unsupported(where, type, kSupportedPostProcessors);
}

std::unique_ptr<PostProcessor> bos_eos_template(std::optional<int32_t> bos, std::optional<int32_t> eos) {
  auto t = std::make_unique<TemplateProcessor>();
  if (bos) t->before.push_back({*bos});
  if (eos) t->after.push_back({*eos});
  return t;
}

}  // namespace lt::text
