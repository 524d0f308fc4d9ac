// load_tokenizer_json on small hand-made tokenizer.json files, each result worked out from the
// algorithm tokenizers implements (merge order by rank, added-token matching, byte fallback,
// Metaspace, decoders, tokenizer_config.json), and the refusals: one lt::Error naming the file
// and the component for anything leantrain does not read or a file that is broken.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <thread>

#include "leantrain/error.h"
#include "text/tokenizer.h"

namespace fs = std::filesystem;
using nlohmann::json;
using Ids = std::vector<int32_t>;

namespace {

fs::path temp_dir() {
  static int n = 0;
  fs::path d = fs::temp_directory_path() / ("lt_test_tokenizer_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string write(const fs::path& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir / name) << text;
  return (dir / name).string();
}

// Loads j (and config, when given) from a fresh directory, removed again afterwards.
std::unique_ptr<lt::text::Tokenizer> load(const json& j, const json& config = nullptr) {
  const fs::path d = temp_dir();
  struct Remove {
    fs::path d;
    ~Remove() { fs::remove_all(d); }
  } remove{d};
  if (!config.is_null()) write(d, "tokenizer_config.json", config.dump());
  return lt::text::load_tokenizer_json(write(d, "tokenizer.json", j.dump()));
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const lt::Error& e) {
    return e.what();
  }
  return "(no error)";
}

// A BPE over a, b, c whose ranks disagree with left-to-right order: "b c" (rank 0) before "a b".
json tiny_bpe() {
  return json::parse(R"({
    "version": "1.0", "added_tokens": [], "normalizer": null, "decoder": null, "post_processor": null,
    "pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "Removed", "invert": false},
    "model": {"type": "BPE", "unk_token": "<unk>", "fuse_unk": false, "byte_fallback": false,
              "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5, "<unk>": 6},
              "merges": ["b c", ["a", "b"], "ab c"]}})");
}

// The sentencepiece layout of Llama 2 on a tiny vocabulary with the 256 byte tokens.
json tiny_sentencepiece() {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  vocab["\u2581"] = 259;
  vocab["h"] = 260;
  vocab["i"] = 261;
  vocab["\u2581h"] = 262;
  vocab["\u2581hi"] = 263;
  json j = json::parse(R"({
    "version": "1.0",
    "added_tokens": [
      {"id": 0, "content": "<unk>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
      {"id": 1, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
      {"id": 2, "content": "</s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                   {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
    "pre_tokenizer": null,
    "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
                {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
    "post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
    "model": {"type": "BPE", "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": true,
              "merges": [["\u2581", "h"], ["\u2581h", "i"]]}})");
  j["model"]["vocab"] = vocab;
  return j;
}

const std::string kRef = std::string(LT_TEST_DATA_DIR) + "/tokenizers/";

}  // namespace

TEST(TokenizerJson, MergesByRankNotLeftToRight) {
  auto t = load(tiny_bpe());
  EXPECT_EQ(t->encode("abc", false), (Ids{0, 4}));  // b+c (rank 0) first; a, bc has no merge
  EXPECT_EQ(t->encode("abab", false), (Ids{3, 3}));
  EXPECT_EQ(t->encode("abc ab  c", false), (Ids{0, 4, 3, 2}));
  EXPECT_EQ(t->decode(Ids{0, 4, 3}, false), "a bc ab");  // no decoder: tokens joined by spaces
  EXPECT_EQ(t->vocab_size(), 7);
  EXPECT_EQ(t->token_to_id("bc"), 4);
  EXPECT_EQ(t->token_to_id("zz"), std::nullopt);
  EXPECT_EQ(t->kind(), "bpe");
}

TEST(TokenizerJson, IgnoreMergesTakesWholeWords) {
  json j = tiny_bpe();
  j["model"]["ignore_merges"] = true;
  auto t = load(j);
  EXPECT_EQ(t->encode("abc", false), (Ids{5}));
  EXPECT_EQ(t->encode("abcc", false), (Ids{0, 4, 2}));
}

TEST(TokenizerJson, UnknownCharactersAndFuseUnk) {
  auto t = load(tiny_bpe());
  EXPECT_EQ(t->encode("xxa", false), (Ids{6, 6, 0}));
  json j = tiny_bpe();
  j["model"]["fuse_unk"] = true;
  EXPECT_EQ(load(j)->encode("xxa", false), (Ids{6, 0}));
  j["model"]["unk_token"] = nullptr;  // no unk token: unknown characters are dropped
  EXPECT_EQ(load(j)->encode("xxa", false), (Ids{0}));
}

TEST(TokenizerJson, SentencePieceByteFallbackAndDecoders) {
  auto t = load(tiny_sentencepiece());
  EXPECT_EQ(t->kind(), "bpe-sentencepiece");
  // "hi hi" -> "▁hi▁hi"; "é" is not in the vocabulary: its two UTF-8 bytes.
  EXPECT_EQ(t->encode("hi hi", false), (Ids{263, 263}));
  EXPECT_EQ(t->encode("h\xC3\xA9", false), (Ids{262, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(t->encode("hi", true), (Ids{1, 263}));
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->eos_id(), 2);
  EXPECT_EQ(t->decode(Ids{1, 263, 262, 3 + 0xC3, 3 + 0xA9}, false), "<s> hi h\xC3\xA9");
  EXPECT_EQ(t->decode(Ids{1, 263, 262, 3 + 0xC3, 3 + 0xA9}, true), "hi h\xC3\xA9");
  // Byte tokens that are not valid UTF-8 together: one U+FFFD per byte.
  EXPECT_EQ(t->decode(Ids{263, 3 + 0xC3, 3 + 0x41}, false), "hi\xEF\xBF\xBD\xEF\xBF\xBD");
  // Special tokens are split out of the raw text; the normalizer then runs on each remaining piece.
  EXPECT_EQ(t->encode("hi</s>hi", false), (Ids{263, 2, 263}));
}

TEST(TokenizerJson, MetaspaceFirstPrependsOnlyAtTheStartOfTheInput) {
  json j = tiny_sentencepiece();
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}, {"split", false}};
  j["decoder"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}, {"split", false}};
  auto t = load(j);
  EXPECT_EQ(t->encode("hi", false), (Ids{263}));
  // After </s> the piece starts at offset 5 of the input: no "▁" is prepended.
  EXPECT_EQ(t->encode("hi</s>hi", false), (Ids{263, 2, 260, 261}));
  EXPECT_EQ(t->encode("</s>hi", false), (Ids{2, 260, 261}));
  j["pre_tokenizer"]["prepend_scheme"] = "always";
  EXPECT_EQ(load(j)->encode("</s>hi", false), (Ids{2, 263}));
  // The decoder drops the replacement characters of the first token, turns later ones into spaces.
  EXPECT_EQ(t->decode(Ids{263, 263}, false), "hi hi");
}

TEST(TokenizerJson, AddedTokensLeftmostLongestAndOptions) {
  json j = tiny_bpe();
  j["pre_tokenizer"] = nullptr;
  j["added_tokens"] = json::parse(R"([
    {"id": 7, "content": "<x>", "single_word": false, "lstrip": true, "rstrip": false, "normalized": false, "special": true},
    {"id": 8, "content": "<x>>", "single_word": false, "lstrip": false, "rstrip": true, "normalized": false, "special": false},
    {"id": 9, "content": "ca", "single_word": true, "lstrip": false, "rstrip": false, "normalized": false, "special": false}])");
  auto t = load(j);
  EXPECT_EQ(t->vocab_size(), 10);
  // Longest at the leftmost position: "<x>>" over "<x>"; rstrip takes the spaces after it.
  EXPECT_EQ(t->encode("a<x>>  b", false), (Ids{0, 8, 1}));
  // lstrip takes the spaces before "<x>" (the space is in no other piece, so <unk> never shows).
  EXPECT_EQ(t->encode("a  <x>b", false), (Ids{0, 7, 1}));
  // single_word: "ca" inside a word is not the added token.
  EXPECT_EQ(t->encode("cab", false), (Ids{2, 3}));
  EXPECT_EQ(t->encode("ca", false), (Ids{9}));
  EXPECT_EQ(t->decode(Ids{0, 7, 9}, true), "a ca");  // <x> is special, ca is not
}

TEST(TokenizerJson, ByteLevelReferenceFiles) {
  auto t = lt::text::load_tokenizer_json(kRef + "gpt2/tokenizer.json");
  EXPECT_EQ(t->kind(), "bpe-bytelevel");
  EXPECT_EQ(t->vocab_size(), 4096);
  EXPECT_EQ(t->bos_id(), 0);  // tokenizer_config.json: <|endoftext|>
  EXPECT_EQ(t->eos_id(), 0);
  const Ids ids = t->encode("Hello<|endoftext|> world", false);
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 0), 1);
  EXPECT_EQ(t->decode(ids, false), "Hello<|endoftext|> world");
  EXPECT_EQ(t->decode(ids, true), "Hello world");
  // Byte-level round trip of text with every kind of character.
  const std::string s = "caf\xC3\xA9 \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD \xE6\x97\xA5\xE6\x9C\xAC\t\n\n  x";
  EXPECT_EQ(t->decode(t->encode(s, false), false), s);
  auto l3 = lt::text::load_tokenizer_json(kRef + "llama3/tokenizer.json");
  EXPECT_EQ(l3->encode("hi", true).front(), 0);  // <|begin_of_text|> from the template
  EXPECT_EQ(l3->eos_id(), 1);
}

TEST(TokenizerJson, InvalidUtf8BecomesReplacementCharacters) {
  auto t = lt::text::load_tokenizer_json(kRef + "gpt2/tokenizer.json");
  // As Python's errors="replace": each maximal invalid subsequence is one U+FFFD.
  EXPECT_EQ(t->encode("a\xFF" "b", false), t->encode("a\xEF\xBF\xBD" "b", false));
  EXPECT_EQ(t->encode("a\xE2\x82" "b", false), t->encode("a\xEF\xBF\xBD" "b", false));
  EXPECT_EQ(t->encode("\xF0\x80", false), t->encode("\xEF\xBF\xBD\xEF\xBF\xBD", false));
  EXPECT_EQ(t->encode("\xED\xA0\x80", false), t->encode("\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD", false));
  // Decoding byte tokens that do not form UTF-8 gives U+FFFD too (never invalid text).
  const auto lead = t->token_to_id("\xC3\x83");  // the character of byte 0xC3 (Ã stands for itself)
  ASSERT_TRUE(lead.has_value());
  EXPECT_EQ(t->decode(Ids{*lead}, false), "\xEF\xBF\xBD");
  EXPECT_EQ(t->decode(Ids{*lead, *lead}, false), "\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(TokenizerJson, WhiteSpaceIsUnicodeWhiteSpaceAsInOniguruma) {
  // U+180E (Mongolian vowel separator) is no longer White_Space: tokenizers' regex (\s in
  // Oniguruma) keeps it with the letters; PCRE2's own \s would treat it as a space.
  const std::string mvs = "\xE1\xA0\x8E";
  json j = tiny_bpe();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}, {"behavior", "Removed"}, {"invert", false}};
  auto w = load(j);
  EXPECT_EQ(w->encode("a\xE2\x80\x83" "b", false), (Ids{0, 1}));  // U+2003 em space splits
  EXPECT_EQ(w->encode("a" + mvs + "b", false), (Ids{0, 6, 1}));   // U+180E does not: <unk> in the word
}

TEST(TokenizerJson, ConfigGivesBosEosAndWhatEncodeAdds) {
  json config = {{"bos_token", {{"content", "<s>"}, {"lstrip", false}}}, {"eos_token", "</s>"},
                 {"add_bos_token", true}, {"add_eos_token", true}};
  auto t = load(tiny_sentencepiece(), config);
  EXPECT_EQ(t->encode("hi", true), (Ids{1, 263, 2}));
  EXPECT_EQ(t->encode("hi", false), (Ids{263}));
  config["add_bos_token"] = false;
  EXPECT_EQ(load(tiny_sentencepiece(), config)->encode("hi", true), (Ids{263, 2}));
  config["eos_token"] = "<nope>";
  EXPECT_NE(error_of([&] { load(tiny_sentencepiece(), config); }).find("eos_token: '<nope>' is not a token"),
            std::string::npos);
}

TEST(TokenizerJson, EncodeFromManyThreadsAgrees) {
  auto t = lt::text::load_tokenizer_json(kRef + "smollm2/tokenizer.json");
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i) texts.push_back("line " + std::to_string(i * 7919) + " of some text, isn't it? " + std::string(size_t(i % 5), ' '));
  std::vector<Ids> serial;
  for (const auto& s : texts) serial.push_back(t->encode(s, false));
  std::vector<std::thread> threads;
  std::vector<int> bad(4, 0);
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (int rep = 0; rep < 5; ++rep)
        for (size_t i = 0; i < texts.size(); ++i) bad[size_t(k)] += t->encode(texts[i], false) != serial[i];
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad, std::vector<int>(4, 0));
}

TEST(TokenizerJson, DecodeRefusesUnknownIds) {
  auto t = load(tiny_bpe());
  EXPECT_NE(error_of([&] { t->decode(Ids{0, 7}, false); }).find("token id 7"), std::string::npos);
  EXPECT_NE(error_of([&] { t->decode(Ids{-1}, false); }).find("token id -1"), std::string::npos);
}

TEST(TokenizerJson, RefusesWhatItDoesNotReadWithOneLine) {
  auto refused = [](json j) { return error_of([&] { load(j); }); };
  auto expect = [](const std::string& msg, const std::string& part) {
    EXPECT_NE(msg.find(part), std::string::npos) << msg;
    EXPECT_NE(msg.find("tokenizer.json"), std::string::npos) << msg;  // names the file
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  };
  json j = tiny_bpe();
  j["model"]["type"] = "Unigram";
  expect(refused(j), "model: type 'Unigram' is not supported");
  j = tiny_bpe();
  j["normalizer"] = {{"type", "Nmt"}};
  expect(refused(j), "normalizer: type 'Nmt' is not supported");
  j = tiny_bpe();
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "Precompiled"}}}}};
  expect(refused(j), "normalizer.normalizers[0]: type 'Precompiled' is not supported");
  j = tiny_bpe();
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  expect(refused(j), "pre_tokenizer: type 'Whitespace' is not supported");
  j = tiny_bpe();
  j["decoder"] = {{"type", "CTC"}};
  expect(refused(j), "decoder: type 'CTC' is not supported");
  j = tiny_bpe();
  j["post_processor"] = {{"type", "BertProcessing"}};
  expect(refused(j), "post_processor.cls: is missing");
  j = tiny_bpe();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(a"}}}, {"behavior", "Isolated"}};
  expect(refused(j), "does not compile");
}

TEST(TokenizerJson, RefusesBrokenFilesCleanly) {
  auto refused = [](json j) { return error_of([&] { load(j); }); };
  json j = tiny_bpe();
  j["model"]["merges"].push_back("a zz");
  EXPECT_NE(refused(j).find("model.merges[3]: 'zz' is not in the vocabulary"), std::string::npos);
  j = tiny_bpe();
  j["model"]["merges"].push_back("c c");
  EXPECT_NE(refused(j).find("the merged token 'cc' is not in the vocabulary"), std::string::npos);
  j = tiny_bpe();
  j["model"]["merges"].push_back("a b c");
  EXPECT_NE(refused(j).find("is not two tokens separated by one space"), std::string::npos);
  j = tiny_bpe();
  j["model"]["vocab"]["zz"] = 2;
  EXPECT_NE(refused(j).find("id 2 is given to both"), std::string::npos);
  j = tiny_bpe();
  j["model"]["vocab"]["zz"] = 1 << 30;
  EXPECT_NE(refused(j).find("is out of range 0..16777215"), std::string::npos);
  j = tiny_bpe();
  j["model"]["vocab"]["zz"] = -1;
  EXPECT_NE(refused(j).find("is out of range"), std::string::npos);
  j = tiny_bpe();
  j["model"]["vocab"] = json::array();
  EXPECT_NE(refused(j).find("model.vocab: expected an object"), std::string::npos);
  j = tiny_bpe();
  j["model"]["unk_token"] = "<nope>";
  EXPECT_NE(refused(j).find("unk_token: '<nope>' is not in the vocabulary"), std::string::npos);
  j = tiny_bpe();
  j["added_tokens"] = json::parse(R"([{"id": 3, "content": "<x>", "special": true}])");
  EXPECT_NE(refused(j).find("'<x>' has id 3 but Hugging Face tokenizers gives it id 7"), std::string::npos);
  j = tiny_bpe();
  j["post_processor"] = json::parse(R"({"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}},
      {"Sequence": {"id": "A"}}], "special_tokens": {"<s>": {"id": "<s>", "ids": [99], "tokens": ["<s>"]}}})");
  EXPECT_NE(refused(j).find("special token id 99 has no token"), std::string::npos);
  j = tiny_bpe();
  j["model"]["merges"].push_back("a\nb c");  // a token with a line break: the message stays one line
  EXPECT_NE(refused(j).find("'a\\nb' is not in the vocabulary"), std::string::npos) << refused(j);
  j = tiny_bpe();
  json nested = {{"type", "Prepend"}, {"prepend", "x"}};
  for (int i = 0; i < 100; ++i) nested = {{"type", "Sequence"}, {"normalizers", json::array({nested})}};
  j["normalizer"] = nested;
  EXPECT_NE(refused(j).find("Sequences are nested more than 16 deep"), std::string::npos) << refused(j);
  j = tiny_bpe();
  j["model"]["dropout"] = 0.1;
  EXPECT_NE(refused(j).find("BPE dropout"), std::string::npos);

  const fs::path d = temp_dir();
  EXPECT_NE(error_of([&] { lt::text::load_tokenizer_json(write(d, "bad.json", "{\"model\": [")); })
                .find("it is not valid JSON"),
            std::string::npos);
  EXPECT_NE(error_of([&] { lt::text::load_tokenizer_json(d.string()); }).find("it is a directory"), std::string::npos);
  EXPECT_NE(error_of([&] { lt::text::load_tokenizer_json((d / "missing.json").string()); }).find("does not exist"),
            std::string::npos);
  fs::remove_all(d);
}

namespace {

// BERT's layout over a hand-made vocabulary: BertNormalizer, BertPreTokenizer, WordPiece.
json tiny_bert(bool lowercase) {
  json j = json::parse(R"({
    "version": "1.0", "added_tokens": [
      {"id": 0, "content": "[PAD]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
      {"id": 1, "content": "[UNK]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
      {"id": 2, "content": "[CLS]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
      {"id": 3, "content": "[SEP]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
    "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true, "strip_accents": null,
                   "lowercase": true},
    "pre_tokenizer": {"type": "BertPreTokenizer"},
    "post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
      "pair": [], "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]},
                                      "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}}},
    "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
    "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
              "max_input_chars_per_word": 12,
              "vocab": {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "hello": 4, "world": 5, "##s": 6, ",": 7,
                        "!": 8, "un": 9, "##believ": 10, "##able": 11, "cafe": 12, "\u4e2d": 13, "'": 14, "t": 15,
                        "don": 16, "Hello": 17, "caf": 18, "##\u00e9": 19}}})");
  j["normalizer"]["lowercase"] = lowercase;
  return j;
}

}  // namespace

TEST(TokenizerJson, WordPieceWithBertNormalizerAndPreTokenizer) {
  auto t = load(tiny_bert(true));
  EXPECT_EQ(t->kind(), "wordpiece");
  // Lowercased, accent stripped (NFD, marks dropped), split at spaces and punctuation, ## pieces.
  EXPECT_EQ(t->encode("H\u00e9llo, WORLDs!", false), (Ids{4, 7, 5, 6, 8}));
  EXPECT_EQ(t->encode("H\u00e9llo, WORLDs!", true), (Ids{2, 4, 7, 5, 6, 8, 3}));
  EXPECT_EQ(t->encode("unbelievable Caf\u00c9", false), (Ids{9, 10, 11, 12}));
  // A word with a part outside the vocabulary, or longer than 12 characters, is one [UNK].
  EXPECT_EQ(t->encode("unbelievablex helloworldhello", false), (Ids{1, 1}));
  // Control characters dropped, tabs and newlines are spaces, CJK ideographs stand alone.
  EXPECT_EQ(t->encode("hello\x01\tworld\xe4\xb8\xadhello", false), (Ids{4, 5, 13, 4}));
  EXPECT_EQ(t->encode("[CLS] hello", false), (Ids{2, 4}));  // a special token in the text
  // The decoder joins pieces and undoes the spacing of punctuation and contractions.
  EXPECT_EQ(t->decode(Ids{2, 4, 7, 5, 6, 8, 3}, true), "hello, worlds!");
  EXPECT_EQ(t->decode(Ids{4, 7, 5, 8}, false), "hello, world!");
  EXPECT_EQ(t->bos_id(), 2);
  EXPECT_EQ(t->eos_id(), 3);
  // Cased: strip_accents follows lowercase (off), so "Café" keeps its accent.
  auto cased = load(tiny_bert(false));
  EXPECT_EQ(cased->encode("Hello caf\u00e9", false), (Ids{17, 18, 19}));
  json bp = tiny_bert(true);
  bp["post_processor"] = json::parse(R"({"type": "BertProcessing", "sep": ["[SEP]", 3], "cls": ["[CLS]", 2]})");
  EXPECT_EQ(load(bp)->encode("hello", true), (Ids{2, 4, 3}));
  json no_unk = tiny_bert(true);
  no_unk["model"]["unk_token"] = "<unk>";
  EXPECT_NE(error_of([&] { load(no_unk); }).find("'<unk>' is not in the vocabulary"), std::string::npos);
}

TEST(TokenizerJson, UnicodeNormalizationForms) {
  json j = tiny_bert(false);
  j["normalizer"] = {{"type", "NFC"}};
  auto nfc = load(j);
  EXPECT_EQ(nfc->encode("cafe\u0301", false), (Ids{18, 19}));  // e + combining acute -> \u00e9: caf ##\u00e9
  j["normalizer"] = {{"type", "NFKC"}};
  EXPECT_EQ(load(j)->encode("\uff28ello", false), (Ids{17}));  // fullwidth H -> H
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFD"}}, {{"type", "NFC"}}}}};
  EXPECT_EQ(load(j)->encode("caf\u00e9", false), (Ids{18, 19}));
}
