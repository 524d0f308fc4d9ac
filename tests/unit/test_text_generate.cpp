// Text in and out of a run: the tokenizer a run picks (train/run_tokenizer.h), the pieces
// `generate` prints (train/decode_stream.h), and a prompt/response task whose loss and
// evaluation count only the response's tokens.
#include <gtest/gtest.h>

#include <fstream>

#include "fake_tokenizers.h"
#include "leantrain/autograd.h"
#include "leantrain/ops.h"
#include "models/registry.h"
#include "train/decode_stream.h"
#include "train/run_tokenizer.h"
#include "train_test_util.h"
#include "unit/error_of.h"

using namespace lt;
namespace fs = std::filesystem;

namespace {
using lt::test::error_of;
}  // namespace

TEST(DecodeStream, PiecesAreTheFullDecodesSuffixes) {
  const std::string e_acute_1 = "\xC3", e_acute_2 = "\xA9", smile_1 = "\xF0\x9F", smile_2 = "\x98\x80";
  test::PieceTokenizer tok({"</s>", "\xE2\x96\x81Hello", "\xE2\x96\x81wor", "ld", e_acute_1, e_acute_2,
                            "\xE2\x96\x81" "caf", "!", smile_1, smile_2});
  DecodeStream s(tok, {1});
  std::vector<std::string> pieces;
  for (int32_t id : {2, 3, 6, 4, 5, 8, 9, 0, 7}) pieces.push_back(s.push(id));
  EXPECT_EQ(pieces, (std::vector<std::string>{" wor", "ld", " caf", "", "\xC3\xA9", "", "\xF0\x9F\x98\x80", "", "!"}));
  EXPECT_EQ(s.finish(), "");
  // Without a prompt the first piece loses its leading space, as the full decode does.
  DecodeStream t(tok, {});
  EXPECT_EQ(t.push(1), "Hello");
  EXPECT_EQ(t.push(2), " wor");
  // A character left incomplete at the end comes out as U+FFFD by finish().
  EXPECT_EQ(t.push(4), "");
  EXPECT_EQ(t.finish(), "\xEF\xBF\xBD");
}

// With the committed tokenizer.json files: the pieces of text streamed one sampled id at a time
// add up to the decode of all of them, for CJK, emoji, accents and runs of spaces.
TEST(DecodeStream, RealTokenizersPiecesAddUpToTheDecode) {
  const std::string text =
      "Hello  world\n\tcaf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E  \xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD "
      "na\xC3\xAFve  x=1;\n\n  done.";
  for (const char* style : {"gpt2", "llama3", "smollm2", "sentencepiece", "sentencepiece-metaspace"}) {
    SCOPED_TRACE(style);
    const auto tok = text::load_tokenizer_json(std::string(LT_TEST_DATA_DIR) + "/tokenizers/" + style + "/tokenizer.json");
    const std::vector<int32_t> ids = tok->encode(text, true);
    for (size_t split : {size_t(0), size_t(1), size_t(5)}) {
      const std::vector<int32_t> prompt(ids.begin(), ids.begin() + int64_t(split));
      DecodeStream s(*tok, prompt);
      std::string streamed;
      for (size_t i = split; i < ids.size(); ++i) streamed += s.push(ids[i]);
      streamed += s.finish();
      EXPECT_EQ(tok->decode(prompt, true) + streamed, tok->decode(ids, true));
    }
  }
}

TEST(DecodeStream, BytesComeOutOneByOneAsBefore) {
  const auto bytes = text::byte_tokenizer();
  DecodeStream s(*bytes, {'a'});
  EXPECT_EQ(s.push(0xC3), "\xC3");
  EXPECT_EQ(s.push(0xA9), "\xA9");
  EXPECT_EQ(s.push('\n'), "\n");
}

TEST(RunTokenizer, WhichTokenizerJson) {
  test::TempDir tmp;
  const fs::path file = tmp.path / "tok" / "tokenizer.json", other = tmp.path / "mine.json";
  fs::create_directories(file.parent_path());
  fs::create_directories(tmp.path / "empty");
  fs::create_directories(tmp.path / "model");
  std::ofstream(file) << "{}";
  std::ofstream(other) << "{}";
  std::ofstream(tmp.path / "model" / "tokenizer.json") << "{}";
  EXPECT_EQ(resolve_tokenizer_json(file.string(), ""), file.string());
  EXPECT_EQ(resolve_tokenizer_json(other.string(), (tmp.path / "model").string()), other.string());
  EXPECT_EQ(resolve_tokenizer_json(file.parent_path().string(), ""), file.string());
  EXPECT_EQ(resolve_tokenizer_json("", (tmp.path / "model").string()), (tmp.path / "model" / "tokenizer.json").string());
  EXPECT_EQ(resolve_tokenizer_json("", (tmp.path / "empty").string()), "");
  EXPECT_EQ(resolve_tokenizer_json("", ""), "");
  EXPECT_NE(error_of([&] { resolve_tokenizer_json((tmp.path / "nope").string(), ""); }).find("not found"), std::string::npos);
  EXPECT_NE(error_of([&] { resolve_tokenizer_json((tmp.path / "empty").string(), ""); })
                .find("the directory holds no tokenizer.json"),
            std::string::npos);
}

TEST(RunTokenizer, FamilyDefaultAndVocabularyCheck) {
  RunTokenizer bytes = load_run_tokenizer("", models::family_of_type("gpt2"), "gpt2-tiny");
  EXPECT_EQ(bytes.tokenizer->kind(), "bytes");
  EXPECT_TRUE(bytes.files.empty());
  EXPECT_EQ(bytes.describe(), "tokenizer bytes (vocab 256)");
  // A family without a built-in tokenizer (the hook LLaMA families use) asks for --tokenizer.
  try {
    load_run_tokenizer("", models::family_of_type("vit"), "vit-tiny");
    FAIL() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("model vit-tiny has no tokenizer"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("pass --tokenizer PATH"), std::string::npos) << e.what();
  }
  check_tokenizer_fits(test::CharTokenizer(), 259, "m");
  try {
    check_tokenizer_fits(test::CharTokenizer(), 256, "m");
    FAIL() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("the tokenizer has 259 ids: model m embeds only 256"), std::string::npos)
        << e.what();
  }
}

TEST(TaskText, PromptTokensAreLeftOutOfLossAndEvaluation) {
  test::TempDir tmp;
  RunConfig c = test::tiny_gpt(tmp.path);
  std::string lines;
  for (int i = 0; i < 300; ++i)
    lines += "{\"prompt\": \"what is " + std::to_string(i) + "? \", \"response\": \"it is " + std::to_string(i * 3) + ".\"}\n";
  std::ofstream(tmp.path / "sft.jsonl") << lines;
  c.data = (tmp.path / "sft.jsonl").string();
  validate(c);
  auto task = make_task(c, Device::cpu());
  EXPECT_TRUE(task->masked_targets);
  EXPECT_NE(task->description.find("tokenizer bytes (vocab 256); data "), std::string::npos) << task->description;
  EXPECT_NE(task->description.find("300 documents"), std::string::npos) << task->description;

  // Evaluation: the mean over the held-out targets that are not -100.
  InferenceModeGuard inference;
  task->model->eval();
  const EvalInfo e = evaluate_task(*task, 4, 0);
  const Dataset& held = *task->held_out;
  const int64_t T = held.input_shape()[0];
  double sum = 0;
  int64_t counted = 0, masked = 0;
  std::vector<int64_t> in(static_cast<size_t>(T)), tg(static_cast<size_t>(T));
  std::vector<int32_t> pos(static_cast<size_t>(T));
  ASSERT_TRUE(held.has_doc_pos());  // --packing docs, the default: the pairs packed in rows
  for (int64_t i = 0; i < held.size(); ++i) {
    held.get(i, in.data(), tg.data());
    held.get_doc_pos(i, pos.data());
    const nn::TokenMask docs = nn::TokenMask::documents(from_ints(std::vector<int64_t>(pos.begin(), pos.end()), {1, T}, DType::I32));
    Tensor logits = task->model->forward(from_ints(in, {1, T}), docs);
    std::vector<float> rows =
        cross_entropy(reshape(logits, {T, -1}), from_ints(tg, {T}), kIgnoreTarget, Reduction::None).to_float_vector();
    // Training's loss: the same mean, over the unmasked targets of a batch.
    double one = 0;
    int64_t n = 0;
    for (int64_t j = 0; j < T; ++j) {
      if (tg[size_t(j)] == kIgnoreTarget) {
        ++masked;
        continue;
      }
      one += rows[size_t(j)], ++n;
    }
    sum += one, counted += n;
    if (n) EXPECT_NEAR(task->model->loss(from_ints(in, {1, T}), from_ints(tg, {1, T}), docs).item(), one / double(n), 1e-5);
  }
  EXPECT_GT(masked, counted / 4);  // the prompts are about half of the text
  EXPECT_GT(counted, 0);
  EXPECT_NEAR(e.loss, sum / double(counted), 1e-5);
}
