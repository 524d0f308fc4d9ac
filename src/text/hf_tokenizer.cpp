// A Hugging Face tokenizer.json: the pipeline of tokenizers' Tokenizer.encode (added tokens,
// normalizer, pre-tokenizer, BPE model, post-processor) and decode (decoder), built from the
// components in this directory.
#include <filesystem>

#include "io/input_file.h"
#include "leantrain/error.h"
#include "text/added_tokens.h"
#include "text/bpe_model.h"
#include "text/decoders.h"
#include "text/json_read.h"
#include "text/normalizers.h"
#include "text/post_processors.h"
#include "text/pre_tokenizers.h"
#include "text/tokenizer.h"
#include "text/utf8.h"
#include "text/wordpiece_model.h"

namespace lt::text {

namespace {

class HfTokenizer : public Tokenizer {
 public:
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<TokenModel> model;
  AddedTokens added;
  std::unique_ptr<Decoder> decoder;
  std::unique_ptr<PostProcessor> post_processor;
  std::optional<int32_t> bos, eos;
  std::string kind_name;

  std::vector<int32_t> encode(std::string_view text, bool add_special) const override {
    std::vector<Piece> pieces;
    Piece whole;
    whole.text = to_valid_utf8(text);
    whole.from_start = whole.text.empty() ? 0 : utf8_char_len(static_cast<unsigned char>(whole.text[0]));
    if (!whole.text.empty()) pieces.push_back(std::move(whole));
    added.split(pieces, /*normalized=*/false);
    if (normalizer)
      for (Piece& p : pieces)
        if (p.id < 0) normalizer->normalize(p);
    added.split(pieces, /*normalized=*/true);
    if (pre_tokenizer) pre_tokenizer->pre_tokenize(pieces);
    std::vector<int32_t> ids;
    ids.reserve(text.size() / 3 + 4);
    for (const Piece& p : pieces) {
      if (p.id >= 0) ids.push_back(p.id);
      else model->tokenize(p.text, ids);
    }
    if (add_special && post_processor) post_processor->add_special(ids);
    return ids;
  }

  std::string decode(std::span<const int32_t> ids, bool skip_special) const override {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (int32_t id : ids) {
      const std::string* t = token(id);
      LT_CHECK(t, "token id " + std::to_string(id),
               "the tokenizer has no token with this id (its ids are 0.." + std::to_string(vocab_size() - 1) + ")",
               "decode ids that this tokenizer produced, or use the model's own tokenizer");
      if (skip_special && added.is_special(*t)) continue;
      tokens.push_back(*t);
    }
    if (!decoder) {
      std::string out;
      for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
      return out;
    }
    decoder->decode_chain(tokens);
    std::string out;
    for (const std::string& t : tokens) out += t;
    return out;
  }

  int64_t vocab_size() const override { return std::max(model->max_id(), added.max_id()) + 1; }

  std::optional<int32_t> token_to_id(std::string_view t) const override {
    if (auto id = added.find(t)) return id;
    return model->token_to_id(t);
  }

  std::optional<int32_t> bos_id() const override { return bos; }
  std::optional<int32_t> eos_id() const override { return eos; }
  std::string kind() const override { return kind_name; }

  // The token of an id: the added token's content first, then the vocabulary's.
  const std::string* token(int32_t id) const {
    if (const AddedToken* a = added.by_id(id)) return &a->content;
    return model->id_to_token(id);
  }
};

// tokenizer_config.json's bos_token / eos_token: a string or {"content": ...}; nullptr if absent.
std::optional<std::string> config_token(const Json& config, const char* key, const JsonReader& r) {
  const Json* v = r.optional(config, "", key);
  if (!v) return std::nullopt;
  if (v->is_object()) return r.string(r.required(*v, key, "content"), field(key, "content"));
  return r.string(*v, key);
}

// BOS / EOS without a tokenizer_config.json: the template's first / last special token, else an
// added special token with one of the usual names.
std::optional<int32_t> guess_special(const HfTokenizer& t, bool leading) {
  if (t.post_processor)
    if (auto id = leading ? t.post_processor->leading_special() : t.post_processor->trailing_special()) return id;
  static const char* const kBos[] = {"<s>", "<|begin_of_text|>", "<bos>", "<|startoftext|>"};
  static const char* const kEos[] = {"</s>", "<|end_of_text|>", "<|endoftext|>", "<eos>"};
  for (const char* name : leading ? std::span<const char* const>(kBos) : std::span<const char* const>(kEos))
    if (t.added.is_special(name)) return t.added.find(name);
  return std::nullopt;
}

void read_config(HfTokenizer& t, const std::string& path) {
  JsonReader r(path);
  const std::string text = io::read_input_file(path, io::kMaxConfigBytes, "as tokenizer_config.json",
                                               "this should be a small JSON file of tokenizer settings");
  Json config;
  try {
    config = Json::parse(text);
  } catch (const Json::exception& e) {
    r.fail("", std::string("it is not valid JSON: ") + e.what());
  }
  r.object(config, "");
  auto id_of = [&](const char* key) -> std::optional<int32_t> {
    auto name = config_token(config, key, r);
    if (!name) return std::nullopt;
    auto id = t.token_to_id(*name);
    if (!id) r.fail(key, "'" + *name + "' is not a token of the tokenizer.json beside it");
    return id;
  };
  const std::optional<int32_t> bos = id_of("bos_token"), eos = id_of("eos_token");
  if (bos) t.bos = bos;
  if (eos) t.eos = eos;
  // add_bos_token / add_eos_token decide what encode(add_special) adds, as transformers' Llama
  // tokenizers rebuild the template from them.
  const Json* add_bos = r.optional(config, "", "add_bos_token");
  const Json* add_eos = r.optional(config, "", "add_eos_token");
  if (add_bos || add_eos) {
    const bool with_bos = add_bos && r.boolean(*add_bos, "add_bos_token");
    const bool with_eos = add_eos && r.boolean(*add_eos, "add_eos_token");
    if (with_bos && !bos) r.fail("add_bos_token", "is true but there is no bos_token");
    if (with_eos && !eos) r.fail("add_eos_token", "is true but there is no eos_token");
    t.post_processor = bos_eos_template(with_bos ? bos : std::nullopt, with_eos ? eos : std::nullopt);
  }
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer_json(const std::string& path) {
  JsonReader r(path);
  const std::string text = io::read_input_file(path, io::kMaxConfigBytes, "as tokenizer.json",
                                               "a Hugging Face tokenizer.json is a few MiB");
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::exception& e) {
    r.fail("", std::string("it is not valid JSON: ") + e.what());
  }
  r.object(j, "");
  auto t = std::make_unique<HfTokenizer>();

  const Json& model = r.required(j, "", "model");
  const Json* model_type = r.optional(model, "model", "type");
  const std::string type = model_type ? r.string(*model_type, "model.type") : (model.contains("merges") ? "BPE" : "");
  if (type != "BPE" && type != "WordPiece")
    r.fail("model", "type '" + (type.empty() ? std::string("(none)") : type) +
                        "' is not supported (leantrain reads BPE and WordPiece models; Unigram and WordLevel are not)",
           kTokenizerDocs);
  if (type == "WordPiece") t->model = WordPieceModel::read(model, "model", r);
  else t->model = BpeModel::read(model, "model", r);
  if (const Json* n = r.optional(j, "", "normalizer")) t->normalizer = read_normalizer(*n, "normalizer", r);
  if (const Json* p = r.optional(j, "", "pre_tokenizer")) t->pre_tokenizer = read_pre_tokenizer(*p, "pre_tokenizer", r);
  if (const Json* d = r.optional(j, "", "decoder")) t->decoder = read_decoder(*d, "decoder", r);
  if (const Json* p = r.optional(j, "", "post_processor"))
    t->post_processor = read_post_processor(*p, "post_processor", r);
  if (const Json* a = r.optional(j, "", "added_tokens")) t->added.read(*a, "added_tokens", r, *t->model, t->normalizer.get());

  if (t->post_processor) {
    std::vector<int32_t> ids;
    t->post_processor->add_special(ids);
    for (int32_t id : ids)
      if (!t->token(id)) r.fail("post_processor", "special token id " + std::to_string(id) + " has no token");
  }
  const bool byte_level = t->pre_tokenizer && t->pre_tokenizer->has("ByteLevel");
  const bool sentencepiece = t->model->byte_fallback() || (t->pre_tokenizer && t->pre_tokenizer->has("Metaspace"));
  t->kind_name = type == "WordPiece" ? "wordpiece" : byte_level ? "bpe-bytelevel" : sentencepiece ? "bpe-sentencepiece" : "bpe";

  t->bos = guess_special(*t, true);
  t->eos = guess_special(*t, false);
  const std::filesystem::path config = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (std::filesystem::exists(config, ec)) read_config(*t, config.string());
  return t;
}

}  // namespace lt::text
