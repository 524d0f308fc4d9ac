// The tokenizer.json styles of tests/data/tokenizers (trained with Hugging Face tokenizers on
// fortunes) against the ids and texts tokenizers itself gives for 10,517 strings: encode with and
// without special tokens, decode with and without skipping them. Every mismatch is a failure.
#include <gtest/gtest.h>
#include <zlib.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sanitized.h"
#include "text/tokenizer.h"

namespace {

const std::string kDir = std::string(LT_TEST_DATA_DIR) + "/tokenizers/";

// The lines of a gzip file.
std::vector<std::string> gz_lines(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) ADD_FAILURE() << "cannot open " << path;
  std::string all;
  char buf[1 << 16];
  int n = 0;
  while (f && (n = gzread(f, buf, sizeof buf)) > 0) all.append(buf, size_t(n));
  if (f) gzclose(f);
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t nl = all.find('\n'); nl != std::string::npos; start = nl + 1, nl = all.find('\n', start))
    lines.push_back(all.substr(start, nl - start));
  if (start < all.size()) lines.push_back(all.substr(start));
  return lines;
}

std::string show(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s + "]";
}

void check_style(const std::string& style) {
  const std::vector<std::string> strings = gz_lines(kDir + "strings.jsonl.gz");
  const std::vector<std::string> expected = gz_lines(kDir + style + "/expected.jsonl.gz");
  ASSERT_GE(strings.size(), 10000u);
  ASSERT_EQ(strings.size(), expected.size());
  auto tok = lt::text::load_tokenizer_json(kDir + style + "/tokenizer.json");
  size_t bad_ids = 0, bad_special = 0, bad_decoded = 0, bad_skip = 0, shown = 0;
  size_t checked = 0;  // every string; every 8th under ASan (tests/unit/sanitized.h)
  for (size_t i = 0; i < strings.size(); i += lt_test::kReferenceStride, ++checked) {
    const std::string text = nlohmann::json::parse(strings[i])["text"].get<std::string>();
    const nlohmann::json e = nlohmann::json::parse(expected[i]);
    const auto want_ids = e["ids"].get<std::vector<int32_t>>();
    const auto want_special = e["ids_special"].get<std::vector<int32_t>>();
    const std::vector<int32_t> ids = tok->encode(text, false);
    const std::vector<int32_t> ids_special = tok->encode(text, true);
    const std::string decoded = tok->decode(want_special, false);
    const std::string decoded_skip = tok->decode(want_special, true);
    const bool ok[4] = {ids == want_ids, ids_special == want_special, decoded == e["decoded"].get<std::string>(),
                        decoded_skip == e["decoded_skip"].get<std::string>()};
    bad_ids += !ok[0];
    bad_special += !ok[1];
    bad_decoded += !ok[2];
    bad_skip += !ok[3];
    if ((!ok[0] || !ok[1] || !ok[2] || !ok[3]) && shown++ < 5)
      ADD_FAILURE() << style << " string " << i << " " << nlohmann::json(text).dump() << ": ids " << show(ids)
                    << " want " << show(want_ids) << "; special " << show(ids_special) << " want "
                    << show(want_special) << "; decoded " << nlohmann::json(decoded).dump() << " want "
                    << e["decoded"].dump() << "; skip " << nlohmann::json(decoded_skip).dump() << " want "
                    << e["decoded_skip"].dump();
  }
  std::printf("%s: %zu of %zu strings; mismatches: ids %zu, ids_special %zu, decoded %zu, decoded_skip %zu\n",
              style.c_str(), checked, strings.size(), bad_ids, bad_special, bad_decoded, bad_skip);
  EXPECT_EQ(bad_ids, 0u);
  EXPECT_EQ(bad_special, 0u);
  EXPECT_EQ(bad_decoded, 0u);
  EXPECT_EQ(bad_skip, 0u);
}

TEST(TokenizerReference, Gpt2) { check_style("gpt2"); }
TEST(TokenizerReference, Llama3) { check_style("llama3"); }
TEST(TokenizerReference, SmolLM2) { check_style("smollm2"); }
TEST(TokenizerReference, SentencePiece) { check_style("sentencepiece"); }
TEST(TokenizerReference, SentencePieceMetaspace) { check_style("sentencepiece-metaspace"); }

}  // namespace
TEST(TokenizerReference, BertUncased) { check_style("bert-uncased"); }
TEST(TokenizerReference, BertCased) { check_style("bert-cased"); }
TEST(TokenizerReference, Roberta) { check_style("roberta"); }
TEST(TokenizerReference, Qwen2) { check_style("qwen2"); }
