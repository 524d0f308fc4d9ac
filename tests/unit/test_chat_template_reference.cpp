// Chat templates against jinja2: tests/chat/render_reference.py renders 1,000 seeded random
// conversations per template in tests/data/chat_templates (the real Llama 3, Qwen3 and Gemma 3
// templates, and Zephyr- and SmolLM2-style ones written for these tests) and a list of small
// templates that exercise each construct (tests/chat/constructs.json); leantrain must give the
// identical text, or fail where jinja2 fails. The first difference is printed with its case.
#include <gtest/gtest.h>

#include <map>
#include <memory>

#include "chat_reference.h"
#include "sanitized.h"
#include "text/chat_template.h"
#include "text/jinja.h"

using lt::text::ChatOptions;
using lt::text::ChatTemplate;
using lt::text::OrderedJson;

namespace {

ChatOptions options_of(const OrderedJson& c) {
  ChatOptions opt;
  opt.add_generation_prompt = c["add_generation_prompt"].get<bool>();
  opt.tools = c["tools"];
  opt.kwargs = c["kwargs"];
  opt.now = c["now"].get<std::time_t>();
  return opt;
}

}  // namespace

TEST(ChatTemplateReference, RandomConversationsMatchJinja2) {
  // 1,000 conversations per template; 125 under ASan (tests/unit/sanitized.h).
  const int count = 1000 / int(lt_test::kReferenceStride);
  const auto cases = lt_test::reference_cases("--count " + std::to_string(count));
  ASSERT_GE(cases.size(), size_t(5 * count));
  std::map<std::string, std::unique_ptr<ChatTemplate>> templates;
  std::map<std::string, int> checked;
  int spans_checked = 0;
  for (size_t k = 0; k < cases.size(); ++k) {
    const OrderedJson& c = cases[k];
    const std::string name = c["template"].get<std::string>();
    auto& t = templates[name];
    if (!t) t = std::make_unique<ChatTemplate>(ChatTemplate::load(lt_test::chat_data_dir() + "/" + name + "/tokenizer_config.json"));
    const ChatOptions opt = options_of(c);
    const std::string where = name + " case " + std::to_string(k) + ": " + c.dump();
    if (c.contains("error")) {
      try {
        const std::string got = t->render(c["messages"], opt);
        FAIL() << where << "\njinja2 failed (" << c["error"] << ") but leantrain rendered " << OrderedJson(got).dump();
      } catch (const lt::text::jinja::TemplateException&) {
        ASSERT_EQ(c["error"], "raised") << where;
      } catch (const lt::Error& e) {
        ASSERT_NE(c["error"], "raised") << where << "\nleantrain: " << e.what();
      }
      ++checked[name];
      continue;
    }
    const std::string want = c["expected"].get<std::string>();
    std::string got;
    try {
      got = t->render(c["messages"], opt);
    } catch (const lt::Error& e) {
      FAIL() << where << "\nleantrain failed: " << e.what();
    }
    ASSERT_EQ(got, want) << where << "\n" << lt_test::first_difference(want, got);
    ++checked[name];
    // Training: the same text, and one span per assistant message, each closed by an end of turn.
    if (opt.add_generation_prompt) continue;
    lt::text::ChatText tr;
    try {
      tr = t->render_for_training(c["messages"], opt);
    } catch (const lt::Error& e) {
      FAIL() << where << "\nrender_for_training failed: " << e.what();
    }
    ASSERT_EQ(tr.text, want) << where;
    size_t assistants = 0;
    for (const auto& m : c["messages"]) assistants += m["role"] == "assistant";
    ASSERT_EQ(tr.assistant.size(), assistants) << where;
    for (size_t s = 0; s < tr.assistant.size(); ++s) {
      const auto [b, e] = tr.assistant[s];
      ASSERT_TRUE(b < e && e <= want.size() && (s == 0 || tr.assistant[s - 1].second <= b)) << where;
      bool closed = false;
      for (const std::string& eot : t->end_of_turn())
        closed = closed || (e >= eot.size() && want.compare(e - eot.size(), eot.size(), eot) == 0);
      ASSERT_TRUE(closed) << where << "\nspan " << s << ": " << OrderedJson(want.substr(b, e - b)).dump();
    }
    ++spans_checked;
  }
  for (const char* name : {"llama3", "qwen3", "gemma3", "zephyr", "smollm2"}) EXPECT_EQ(checked[name], count) << name;
  EXPECT_GT(spans_checked, 2 * count);
}

TEST(ChatTemplateReference, ConstructsMatchJinja2) {
  const auto cases = lt_test::reference_cases("--constructs " + lt_test::chat_script_dir() + "/constructs.json");
  ASSERT_GE(cases.size(), 30u);
  lt::text::jinja::Dict no_vars;
  for (size_t k = 0; k < cases.size(); ++k) {
    const OrderedJson& c = cases[k];
    const std::string where = "construct " + std::to_string(k) + ": " + c["source"].dump();
    lt::text::jinja::Dict vars;
    for (const auto& [key, v] : c["vars"].items()) vars.set(key, lt::text::jinja::from_json(v));
    try {
      lt::text::jinja::Template t(c["source"].get<std::string>(), "construct " + std::to_string(k));
      const std::string got = t.render(vars, c["now"].get<std::time_t>()).text;
      if (c.contains("error")) FAIL() << where << "\njinja2 failed (" << c["error"] << ") but leantrain rendered " << OrderedJson(got).dump();
      const std::string want = c["expected"].get<std::string>();
      EXPECT_EQ(got, want) << where << "\n" << lt_test::first_difference(want, got);
    } catch (const lt::text::jinja::TemplateException&) {
      EXPECT_EQ(c.value("error", ""), "raised") << where;
    } catch (const lt::Error& e) {
      EXPECT_TRUE(c.contains("error")) << where << "\nleantrain failed: " << e.what();
    }
  }
}
