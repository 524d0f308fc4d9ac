// Conversation data through the text pipeline (issue 48): a .jsonl file of {"messages": [...]}
// lines rendered by a chat template, tokenized, and the loss put on the assistant's tokens
// (--train-on assistant) or on all of them; a prompt/response pair's prompt with --train-on all;
// every bad line one error naming file:line. With the committed test tokenizers (always), and
// with the real Llama 3, Qwen3 and Gemma 3 tokenizer.json files when LT_CHAT_TOKENIZERS points
// at them (as ChatTemplateTokens.* finds them).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "chat_reference.h"
#include "leantrain/data.h"
#include "leantrain/error.h"
#include "text/chat_data.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "unit/error_of.h"

using namespace lt;
using lt::test::error_of;
namespace fs = std::filesystem;

namespace {

fs::path temp_file(const std::string& name, const std::string& body) {
  const fs::path d = fs::temp_directory_path() / ("lt_test_chat_data_" + std::to_string(::getpid()));
  fs::create_directories(d);
  std::ofstream(d / name, std::ios::binary) << body;
  return d / name;
}

std::shared_ptr<const text::ChatTemplate> chat_template(const std::string& name) {
  return std::make_shared<const text::ChatTemplate>(
      text::ChatTemplate::load(lt_test::chat_data_dir() + "/" + name + "/tokenizer_config.json"));
}

const text::Tokenizer& test_tokenizer(const std::string& style) {
  static std::map<std::string, std::unique_ptr<text::Tokenizer>> toks;
  auto& t = toks[style];
  if (!t) t = text::load_tokenizer_json(std::string(LT_TEST_DATA_DIR) + "/tokenizers/" + style + "/tokenizer.json");
  return *t;
}

TextOptions options(const std::string& tmpl, TrainOn on = TrainOn::Assistant) {
  TextOptions o;
  o.val_fraction = 0;  // everything in train, in order
  o.train_on = on;
  if (!tmpl.empty()) o.chat_template = [tmpl] { return chat_template(tmpl); };
  return o;
}

// The texts of the runs of target tokens, decoded (special tokens kept).
std::vector<std::string> target_runs(const TokenStream& s, const text::Tokenizer& tok) {
  std::vector<std::string> out;
  std::vector<int32_t> run;
  for (int64_t i = 0; i <= s.size(); ++i) {
    if (i < s.size() && s.is_target(i)) {
      run.push_back(s[i]);
      continue;
    }
    if (!run.empty()) out.push_back(tok.decode(run, false));
    run.clear();
  }
  return out;
}

const char* kTwoTurns =
    R"({"messages": [{"role": "user", "content": "Capital of France?"}, {"role": "assistant", "content": "Paris."},)"
    R"( {"role": "user", "content": "And of Italy?"}, {"role": "assistant", "content": "Rome."}]})";

}  // namespace

TEST(ChatData, AssistantTurnsCarryTheLoss) {
  const fs::path f = temp_file("two.jsonl", std::string(kTwoTurns) + "\n\n" + kTwoTurns + "\n");
  const text::Tokenizer& tok = test_tokenizer("llama3");
  const TokenCorpus c = load_text(f.string(), tok, options("llama3"));
  EXPECT_EQ(c.documents, 2);
  EXPECT_EQ(c.train.document_starts().size(), 2u);
  // Each assistant message's content and its end-of-turn token, nothing else.
  EXPECT_EQ(target_runs(c.train, tok),
            (std::vector<std::string>{"Paris.<|eot_id|>", "Rome.<|eot_id|>", "Paris.<|eot_id|>", "Rome.<|eot_id|>"}));
  // The ids are the library's, conversation by conversation, with no BOS or EOS added: the
  // template writes them.
  const text::ChatTokens t = text::chat_training_tokens(tok, *chat_template("llama3"),
                                                        text::parse_chat_example(kTwoTurns, "x"), TrainOn::Assistant, {}, "x");
  std::vector<int32_t> twice = t.ids;
  twice.insert(twice.end(), t.ids.begin(), t.ids.end());
  EXPECT_EQ(c.train.ids(), twice);
  EXPECT_EQ(c.train[0], *tok.token_to_id("<|begin_of_text|>"));
}

TEST(ChatData, QwenTemplateWithItsTokenizerLayout) {
  // The Qwen2 layout test tokenizer has <|im_start|> and <|im_end|> as added tokens.
  const fs::path f = temp_file("qwen.jsonl", std::string(kTwoTurns) + "\n");
  const text::Tokenizer& tok = test_tokenizer("qwen2");
  const TokenCorpus c = load_text(f.string(), tok, options("qwen3"));
  const std::vector<std::string> runs = target_runs(c.train, tok);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0], "Paris.<|im_end|>");
  // The last turn keeps its (empty) think block, which the model generates.
  EXPECT_EQ(runs[1], "<think>\n\n</think>\n\nRome.<|im_end|>");
}

TEST(ChatData, TrainOnAllAndPromptResponsePairs) {
  const fs::path chat = temp_file("all.jsonl", std::string(kTwoTurns) + "\n");
  const text::Tokenizer& tok = test_tokenizer("llama3");
  const TokenCorpus all = load_text(chat.string(), tok, options("llama3", TrainOn::All));
  EXPECT_FALSE(all.train.any_masked());
  EXPECT_GT(all.train.size(), 20);
  // A pair's prompt is masked by default and a target with --train-on all.
  const fs::path pairs = temp_file("pairs.jsonl", "{\"prompt\": \"Q: 2+2?\\nA:\", \"response\": \" 4.\"}\n");
  EXPECT_TRUE(load_text(pairs.string(), tok, options("")).train.any_masked());
  EXPECT_FALSE(load_text(pairs.string(), tok, options("", TrainOn::All)).train.any_masked());
}

TEST(ChatData, BadLinesAreOneLineErrorsNamingTheLine) {
  const text::Tokenizer& tok = test_tokenizer("llama3");
  auto error = [&](const std::string& body, const std::string& tmpl = "llama3", TrainOn on = TrainOn::Assistant) {
    const fs::path f = temp_file("bad.jsonl", body);
    const std::string e = error_of([&] { load_text(f.string(), tok, options(tmpl, on)); });
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    return e;
  };
  const std::string one = std::string(kTwoTurns) + "\n";
  std::string e = error(one + "{\"text\": \"hello\"}\n");
  EXPECT_NE(e.find("bad.jsonl:2"), std::string::npos) << e;
  EXPECT_NE(e.find("no \"messages\""), std::string::npos) << e;
  e = error("{\"text\": \"hello\"}\n" + one);
  EXPECT_NE(e.find("bad.jsonl:2"), std::string::npos) << e;
  EXPECT_NE(e.find("conversations or texts, not both"), std::string::npos) << e;
  // A role the template refuses: its raise_exception, with the line.
  e = error(R"({"messages": [{"role": "bot", "content": "hi"}]})" "\n", "zephyr", TrainOn::All);
  EXPECT_NE(e.find("bad.jsonl:1"), std::string::npos) << e;
  EXPECT_NE(e.find("Unknown role: bot"), std::string::npos) << e;
  e = error(R"({"messages": [{"role": "user", "content": "hi"}]})" "\n");
  EXPECT_NE(e.find("no assistant message"), std::string::npos) << e;
  e = error(R"({"messages": []})" "\n");
  EXPECT_NE(e.find("non-empty list"), std::string::npos) << e;
  e = error(R"({"messages": [{"content": "hi"}]})" "\n");
  EXPECT_NE(e.find("messages[0]"), std::string::npos) << e;
  e = error(one, "");  // no template
  EXPECT_NE(e.find("bad.jsonl:1"), std::string::npos) << e;
  EXPECT_NE(e.find("no chat template"), std::string::npos) << e;
}

TEST(ChatData, RealTokenizers) {
  const char* root = std::getenv("LT_CHAT_TOKENIZERS");
  if (!root || !*root) GTEST_SKIP() << "set LT_CHAT_TOKENIZERS to a directory with <name>/tokenizer.json (llama3, qwen3, gemma3)";
  const std::map<std::string, std::vector<std::string>> want = {
      {"llama3", {"Paris.<|eot_id|>", "Rome.<|eot_id|>"}},
      {"qwen3", {"Paris.<|im_end|>", "<think>\n\n</think>\n\nRome.<|im_end|>"}},
      {"gemma3", {"Paris.<end_of_turn>", "Rome.<end_of_turn>"}},
  };
  const fs::path f = temp_file("real.jsonl", std::string(kTwoTurns) + "\n");
  for (const auto& [name, runs] : want) {
    SCOPED_TRACE(name);
    std::string path;
    for (const std::string& p : {std::string(root) + "/" + name + "/tokenizer.json",
                                 std::string(root) + "/tokenizer-" + name + "/models/tokenizer.json"})
      if (fs::exists(p)) path = p;
    if (path.empty()) continue;
    const auto tok = text::load_tokenizer_json(path);
    const TokenCorpus c = load_text(f.string(), *tok, options(name));
    EXPECT_EQ(target_runs(c.train, *tok), runs);
    // The end-of-turn token is one added token of the real tokenizer.
    const auto tmpl = chat_template(name);
    for (const std::string& eot : tmpl->end_of_turn()) EXPECT_TRUE(tok->token_to_id(eot)) << eot;
    const TokenCorpus all = load_text(f.string(), *tok, options(name, TrainOn::All));
    EXPECT_FALSE(all.train.any_masked());
    EXPECT_EQ(all.train.ids(), c.train.ids());
  }
}
