// Tokenized text corpora: the token stream's widths and flags, BOS/EOS placement, packing into
// windows with masked prompt targets, JSON lines and their errors, the byte tokenizer's corpus
// equal to the generic path's, and the same corpus for any number of threads.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "fake_tokenizers.h"
#include "leantrain/data.h"
#include "leantrain/error.h"
#include "unit/error_of.h"

using namespace lt;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("lt_test_data_tokens_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}
void write(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

TextOptions no_val(int workers = 1) {
  TextOptions o;
  o.val_fraction = 0;
  o.workers = workers;
  return o;
}

// The CharTokenizer's ids of `s` (no specials).
std::vector<int32_t> chars(const std::string& s) { return test::CharTokenizer().encode(s, false); }
std::vector<int32_t> cat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}
std::vector<bool> targets(const TokenStream& t) {
  std::vector<bool> out;
  for (int64_t i = 0; i < t.size(); ++i) out.push_back(t.is_target(i));
  return out;
}
using lt::test::error_of;

}  // namespace

TEST(TokenStream, WidthFollowsTheVocabulary) {
  EXPECT_EQ(TokenStream(256).bytes_per_token(), 1);
  EXPECT_EQ(TokenStream(257).bytes_per_token(), 2);
  EXPECT_EQ(TokenStream(65536).bytes_per_token(), 2);
  EXPECT_EQ(TokenStream(128256).bytes_per_token(), 4);
  for (int64_t vocab : {256, 50257, 128256}) {
    TokenStream t(vocab);
    std::vector<int32_t> ids = {0, 1, 255, int32_t(vocab - 1), 7};
    t.append(ids);
    EXPECT_EQ(t.ids(), ids);
    std::vector<int64_t> row(3);
    t.read(2, 3, row.data());
    EXPECT_EQ(row, (std::vector<int64_t>{255, vocab - 1, 7}));
    EXPECT_FALSE(t.any_masked());
  }
  TokenStream t(300);
  EXPECT_THROW(t.append(std::vector<int32_t>{300}), Error);
  EXPECT_THROW(t.append(std::vector<int32_t>{-1}), Error);
  EXPECT_EQ(t.size(), 0);
}

TEST(TokenStream, TargetFlagsAndSlices) {
  TokenStream t(1000);
  t.append(std::vector<int32_t>{1, 2, 3});
  t.append(std::vector<int32_t>{4, 5}, /*target=*/false);
  t.append(std::vector<int32_t>{6});
  EXPECT_TRUE(t.any_masked());
  EXPECT_EQ(targets(t), (std::vector<bool>{true, true, true, false, false, true}));
  TokenStream u(1000);
  u.append(std::vector<int32_t>{9});
  u.append(t, 2, 5);
  EXPECT_EQ(u.ids(), (std::vector<int32_t>{9, 3, 4, 5}));
  EXPECT_EQ(targets(u), (std::vector<bool>{true, true, false, false}));
}

TEST(TokenCorpus, EachDocumentHasBosAndEndsWithEos) {
  fs::path d = temp_dir("bos_eos");
  write(d / "a.txt", "ab");
  write(d / "b.txt", "c");
  test::CharTokenizer tok;
  TokenCorpus c = load_text(d.string(), tok, no_val());
  EXPECT_EQ(c.documents, 2);
  EXPECT_EQ(c.train.ids(), cat({{1}, chars("ab"), {2, 1}, chars("c"), {2}}));
  EXPECT_FALSE(c.train.any_masked());
  // A post-processor that appends EOS itself: not twice.
  TokenCorpus p = load_text(d.string(), test::CharTokenizer(true, true, true), no_val());
  EXPECT_EQ(p.train.ids(), c.train.ids());
  // No BOS: documents start with their text.
  TokenCorpus n = load_text(d.string(), test::CharTokenizer(false, true), no_val());
  EXPECT_EQ(n.train.ids(), cat({chars("ab"), {2}, chars("c"), {2}}));
  fs::remove_all(d);
}

TEST(TokenCorpus, TextFilesKeepTheirTailForValidation) {
  fs::path d = temp_dir("tail");
  write(d / "a.txt", "01234567");  // BOS + 8 + EOS = 10 tokens: the last 2 to validation
  TextOptions o;
  o.val_fraction = 0.2;
  TokenCorpus c = load_text((d / "a.txt").string(), test::CharTokenizer(), o);
  EXPECT_EQ(c.train.ids(), cat({{1}, chars("0123456")}));
  EXPECT_EQ(c.val.ids(), cat({chars("7"), {2}}));
  fs::remove_all(d);
}

TEST(TokenCorpus, PromptResponseLinesMaskThePrompt) {
  fs::path d = temp_dir("jsonl");
  write(d / "sft.jsonl",
        "{\"prompt\": \"Q\", \"response\": \"ab\"}\n"
        "\n"  // blank lines are skipped
        "{\"text\": \"xy\", \"source\": 3}\r\n"
        "{\"prompt\": \"\", \"response\": \"z\"}\n");
  test::CharTokenizer tok;
  TokenCorpus c = load_text((d / "sft.jsonl").string(), tok, no_val());
  EXPECT_EQ(c.documents, 3);
  EXPECT_EQ(c.train.ids(), cat({{1}, chars("Q"), chars("ab"), {2}, {1}, chars("xy"), {2}, {1}, chars("z"), {2}}));
  EXPECT_EQ(targets(c.train), (std::vector<bool>{false, false, true, true, true,  // BOS Q | a b EOS
                                                  true, true, true, true,          // BOS x y EOS
                                                  false, true, true}));            // BOS | z EOS
  // The prompt's EOS from a post-processor is dropped: EOS follows the response only.
  TokenCorpus p = load_text((d / "sft.jsonl").string(), test::CharTokenizer(true, true, true), no_val());
  EXPECT_EQ(p.train.ids(), c.train.ids());
  EXPECT_EQ(targets(p.train), targets(c.train));

  // Windows: inputs ids[i..i+T), targets ids[i+1..i+T+1) with -100 where the token is a prompt's.
  auto stream = std::make_shared<const TokenStream>(std::move(c.train));
  TokenWindows w(stream, 4);
  EXPECT_EQ(w.size(), 2);
  std::vector<int64_t> in(4), tg(4);
  w.get(0, in.data(), tg.data());
  EXPECT_EQ(in, (std::vector<int64_t>{1, 'Q' + 3, 'a' + 3, 'b' + 3}));
  EXPECT_EQ(tg, (std::vector<int64_t>{kIgnoreTarget, 'a' + 3, 'b' + 3, 2}));
  w.get(1, in.data(), tg.data());
  EXPECT_EQ(in, (std::vector<int64_t>{2, 1, 'x' + 3, 'y' + 3}));
  EXPECT_EQ(tg, (std::vector<int64_t>{1, 'x' + 3, 'y' + 3, 2}));
  fs::remove_all(d);
}

TEST(TokenCorpus, OtherFieldNames) {
  fs::path d = temp_dir("fields");
  write(d / "a.jsonl", "{\"instruction\": \"Q\", \"output\": \"a\"}\n");
  TextOptions o = no_val();
  o.prompt_field = "instruction";
  o.response_field = "output";
  TokenCorpus c = load_text((d / "a.jsonl").string(), test::CharTokenizer(), o);
  EXPECT_EQ(targets(c.train), (std::vector<bool>{false, false, true, true}));
  // With the default names the same line has no fields the reader knows.
  EXPECT_NE(error_of([&] { load_text((d / "a.jsonl").string(), test::CharTokenizer(), no_val()); })
                .find("a.jsonl:1: it has no \"text\" field and no \"prompt\"/\"response\" fields"),
            std::string::npos);
  fs::remove_all(d);
}

TEST(TokenCorpus, BadJsonLinesNameFileAndLine) {
  fs::path d = temp_dir("bad_jsonl");
  const std::string good = "{\"text\": \"fine\"}\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"text\": \"unterminated}", ":2: it is not JSON (byte "},
      {"not json at all", ":2: it is not JSON (byte 2 of the line: invalid literal)"},
      {"[\"text\", \"x\"]", ":2: it is a JSON array, not an object"},
      {"{\"text\": 5}", ":2: field \"text\" is number, not a string"},
      {"{\"prompt\": \"p\", \"response\": null}", ":2: field \"response\" is null, not a string"},
      {"{\"prompt\": \"p\"}", ":2: it has \"prompt\" but no \"response\""},
      {"{\"response\": \"r\"}", ":2: it has \"response\" but no \"prompt\""},
      {"{\"text\": \"t\", \"prompt\": \"p\", \"response\": \"r\"}", ":2: it has \"text\" and \"prompt\""},
      {"{\"body\": \"t\"}", ":2: it has no \"text\" field"},
      {"{\"text\": \"\xff\xfe\"}", ":2: it is not JSON (byte "},  // JSON text is UTF-8
      // Valid JSON with a number no double holds (found by the text fuzz harness: it escaped as
      // nlohmann's out_of_range, i.e. a crash).
      {"2E111111111111111111111", ":2: it holds a number too large for a double (number overflow parsing"},
      {"{\"text\": \"t\", \"n\": 1e400}", ":2: it holds a number too large for a double"},
  };
  for (const auto& [line, want] : cases) {
    write(d / "x.jsonl", good + line + "\n" + good);
    const std::string e = error_of([&] { load_text((d / "x.jsonl").string(), test::CharTokenizer(), no_val()); });
    EXPECT_NE(e.find((d / "x.jsonl").string() + want), std::string::npos) << line << " -> " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  fs::remove_all(d);
}

TEST(TokenCorpus, JsonLinesSplitEveryKthDocument) {
  fs::path d = temp_dir("jsonl_split");
  std::string s;
  for (int i = 0; i < 10; ++i) s += "{\"text\": \"" + std::to_string(i) + "\"}\n";
  write(d / "a.jsonl", s);
  TextOptions o;
  o.val_fraction = 0.25;  // every 4th line
  TokenCorpus c = load_text((d / "a.jsonl").string(), test::CharTokenizer(false, true), o);
  EXPECT_EQ(c.val.ids(), cat({chars("3"), {2}, chars("7"), {2}}));
  EXPECT_EQ(c.train.size(), 8 * 2);
  fs::remove_all(d);
}

TEST(TokenCorpus, WithoutEosDocumentsKeepTheirSeparator) {
  fs::path d = temp_dir("no_eos");
  fs::create_directories(d / "f");
  write(d / "f" / "x", "one\n%\ntwo\n%\n");
  write(d / "a.jsonl", "{\"prompt\": \"p\", \"response\": \"r\"}\n{\"text\": \"t\"}\n");
  const auto bytes = text::byte_tokenizer();
  auto str = [](const TokenStream& t) {
    std::string s;
    for (int32_t id : t.ids()) s.push_back(char(id));
    return s;
  };
  EXPECT_EQ(str(load_fortunes(*bytes, no_val(), (d / "f").string()).train), "one\n%\ntwo\n%\n");
  TokenCorpus j = load_text((d / "a.jsonl").string(), *bytes, no_val());
  EXPECT_EQ(str(j.train), "pr\nt\n");
  EXPECT_EQ(targets(j.train), (std::vector<bool>{false, true, true, true, true}));
  fs::remove_all(d);
}

// The byte tokenizer's corpus is built without encode() (its bytes are its ids); a tokenizer that
// encodes the same way through the generic path must give the same corpus, also with many threads.
TEST(TokenCorpus, BytePathEqualsGenericPathForAnyThreadCount) {
  class SlowBytes : public test::CharTokenizer {
   public:
    SlowBytes() : CharTokenizer(false, false, false, "generic-bytes") {}
    std::vector<int32_t> encode(std::string_view text, bool) const override {
      return std::vector<int32_t>(text.begin(), text.end());  // chars are signed: only ASCII below
    }
    int64_t vocab_size() const override { return 256; }
  };
  fs::path d = temp_dir("paths");
  std::string fortunes, jsonl;
  for (int i = 0; i < 200; ++i) {
    fortunes += "fortune " + std::to_string(i) + " says hi\n%\n";
    jsonl += "{\"prompt\": \"q" + std::to_string(i) + "\", \"response\": \"a" + std::to_string(i * 7) + "\"}\n";
  }
  fs::create_directories(d / "f");
  write(d / "f" / "x", fortunes);
  write(d / "a.jsonl", jsonl);
  write(d / "b.txt", "plain text file\n");
  const auto bytes = text::byte_tokenizer();
  SlowBytes generic;
  TextOptions one;
  one.val_fraction = 0.1;
  TextOptions many = one;
  many.workers = 7;
  for (const auto& load : std::vector<std::function<TokenCorpus(const text::Tokenizer&, const TextOptions&)>>{
           [&](auto& t, auto& o) { return load_fortunes(t, o, (d / "f").string()); },
           [&](auto& t, auto& o) { return load_text(d.string(), t, o); }}) {
    TokenCorpus a = load(*bytes, one), b = load(generic, one), c = load(generic, many);
    for (const TokenCorpus* x : {&b, &c}) {
      EXPECT_EQ(a.train.ids(), x->train.ids());
      EXPECT_EQ(a.val.ids(), x->val.ids());
      EXPECT_EQ(targets(a.train), targets(x->train));
      EXPECT_EQ(targets(a.val), targets(x->val));
      EXPECT_EQ(a.documents, x->documents);
    }
    EXPECT_GT(a.val.size(), 0);
  }
  fs::remove_all(d);
}

// A tokenizer error on a worker thread comes back to the caller (the first document's, whatever
// the thread count).
TEST(TokenCorpus, TokenizerErrorsReachTheCaller) {
  class Picky : public test::CharTokenizer {
   public:
    std::vector<int32_t> encode(std::string_view text, bool add_special) const override {
      if (text.find('!') != std::string_view::npos) fail("cannot encode '" + std::string(text) + "'", "it has '!'", "drop it");
      return CharTokenizer::encode(text, add_special);
    }
  };
  fs::path d = temp_dir("picky");
  std::string s;
  for (int i = 0; i < 50; ++i) s += i == 20 || i == 40 ? "{\"text\": \"no" + std::to_string(i) + "!\"}\n" : "{\"text\": \"ok\"}\n";
  write(d / "a.jsonl", s);
  for (int workers : {1, 4})
    EXPECT_NE(error_of([&] { load_text((d / "a.jsonl").string(), Picky(), no_val(workers)); }).find("cannot encode 'no20!'"),
              std::string::npos);
  fs::remove_all(d);
}
