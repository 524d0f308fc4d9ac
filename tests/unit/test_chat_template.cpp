// Chat templates beyond the jinja2 comparison (test_chat_template_reference.cpp): the refusals
// (one lt::Error naming the template line for a construct outside the subset), the end-of-turn
// tokens, the assistant spans render_for_training finds (exact spans on hand-made
// conversations; the prefix difference agreeing with {% generation %} blocks on 300 random
// ones) and tokenize_chat's ids and mask.
#include <gtest/gtest.h>

#include <memory>

#include "chat_reference.h"
#include "error_of.h"
#include "text/chat_data.h"
#include "text/chat_template.h"
#include "text/jinja.h"
#include "text/tokenizer.h"

using lt::test::error_of;
using lt::text::ChatOptions;
using lt::text::ChatTemplate;
using lt::text::ChatText;
using lt::text::OrderedJson;
using lt::text::SpanMethod;

namespace {

ChatTemplate real(const std::string& name) {
  return ChatTemplate::load(lt_test::chat_data_dir() + "/" + name + "/tokenizer_config.json");
}

std::string render_source(const std::string& source, const OrderedJson& vars = OrderedJson::object()) {
  lt::text::jinja::Template t(source, "test");
  lt::text::jinja::Dict d;
  for (const auto& [k, v] : vars.items()) d.set(k, lt::text::jinja::from_json(v));
  return t.render(d, 0).text;
}

OrderedJson msg(const std::string& role, const std::string& content) { return {{"role", role}, {"content", content}}; }

std::vector<std::string> span_texts(const ChatText& c) {
  std::vector<std::string> out;
  for (const auto& [b, e] : c.assistant) out.push_back(c.text.substr(b, e - b));
  return out;
}

}  // namespace

TEST(ChatTemplate, UnsupportedConstructsNameTheLine) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"a\n{% include 'x' %}", "line 2: the {% include %} tag is not supported"},
      {"a\nb\n{{ x | wordwrap }}", "line 3: the filter 'wordwrap' is not supported"},
      {"{% for x in y recursive %}{% endfor %}", "line 1: recursive for loops are not supported"},
      {"\n{{ x is callable_thing }}", "line 2: the test 'callable_thing' is not supported"},
      {"{% call m() %}{% endcall %}", "line 1: the {% call %} tag is not supported"},
      {"{% if x %}", "the template ends inside a block"},
      {"{{ x", "line 1: a tag {{ is never closed"},
      {"{# x", "line 1: a comment {# ... is never closed"},
      {"{% endfor %}", "unknown tag 'endfor'"},
      {"{% set a, b = 1, 2 %}", "unpacking"},
      {"{{ '%s' % 1 }}", "'%' string formatting is not supported"},
      {"\n\n{{ 'É'.upper() }}", "line 3: upper() of text with non-ASCII characters is not supported"},
      {"{{ [1]|tojson(ensure_ascii=true) }}", "ensure_ascii=True is not supported"},
      {"{{ 'a'.format(1) }}", "the string method 'format' is not supported"},
      {"{{ " + std::string(300, '(') + "1" + std::string(300, ')') + " }}", "nest more than 200 deep"},
      {"{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", "nests calls more than 100 deep"},
      {"{{ range(200000)|length }}", "more than 100,000 items"},
      {"{{ range(-9223372036854775807, 9223372036854775807)|length }}", "more than 100,000 items"},
      {"{{ l.99999999999999999999 }}", "is out of range"},
      {"{{ 99999999999999999999 }}", "is out of range"},
      {"{{ 9223372036854775807 + 1 }}", "beyond 64 bits"},
      {"{{ (-9223372036854775807 - 1) // -1 }}", "beyond 64 bits"},
  };
  for (const auto& c : cases) {
    const std::string& source = c.first;  // (clang 14 lambdas cannot capture structured bindings)
    const std::string& want = c.second;
    const std::string e = error_of([&] { render_source(source); });
    EXPECT_NE(e.find("chat template test"), std::string::npos) << source << " -> " << e;
    EXPECT_NE(e.find(want), std::string::npos) << source << " -> " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << "one line: " << e;
  }
}

TEST(ChatTemplate, RuntimeErrorsAsJinja2RaisesThem) {
  EXPECT_NE(error_of([] { render_source("\n{{ 'a' + x }}"); }).find("line 2: 'x' is undefined"), std::string::npos);
  EXPECT_NE(error_of([] { render_source("{{ d.z.w }}", {{"d", OrderedJson::object()}}); })
                .find("'dict object' has no attribute 'z'"),
            std::string::npos);
  EXPECT_NE(error_of([] { render_source("{{ l.append(1) }}", {{"l", OrderedJson::array()}}); }).find("unsafe"),
            std::string::npos);
  // raise_exception is its own type, with the template's message (made one line).
  try {
    render_source("x\n{{ raise_exception('Roles must\\nalternate') }}");
    FAIL() << "no exception";
  } catch (const lt::text::jinja::TemplateException& e) {
    EXPECT_EQ(e.why(), "Roles must\\nalternate");
    EXPECT_NE(std::string(e.what()).find("at line 2"), std::string::npos) << e.what();
  }
  // Undefined prints as nothing and is falsy; its length is 0; it iterates as empty.
  EXPECT_EQ(render_source("[{{ x }}]{{ x|length }}{% if not x %}F{% endif %}{% for i in x %}i{% endfor %}"), "[]0F");
  EXPECT_EQ(render_source("{{ 1 ** 4611686018427387904 }}{{ (-1) ** 3 }}{{ 0 ** 0 }}"), "1-11");
}

TEST(ChatTemplate, LoadRefusesBadConfigs) {
  const std::string dir = ::testing::TempDir();
  auto write = [&](const std::string& name, const std::string& text) {
    const std::string p = dir + "/" + name;
    FILE* f = std::fopen(p.c_str(), "w");
    std::fputs(text.c_str(), f);
    std::fclose(f);
    return p;
  };
  EXPECT_NE(error_of([&] { ChatTemplate::load(write("lt_ct_a.json", "{\"bos_token\": \"<s>\"}")); }).find("no chat_template"),
            std::string::npos);
  EXPECT_NE(error_of([&] { ChatTemplate::load(write("lt_ct_b.json", "{\"chat_template\": 3}")); }).find("neither a string nor a list"),
            std::string::npos);
  EXPECT_NE(error_of([&] { ChatTemplate::load(write("lt_ct_c.json", "{\"chat_template\": [{\"name\": \"x\", \"template\": \"a\"}]}")); })
                .find("none is named 'default'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { ChatTemplate::load(write("lt_ct_d.json", "{nope")); }).find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of([&] { ChatTemplate::load(write("lt_ct_e.json", "{\"chat_template\": \"{% if %}\"}")); }).find("line 1"),
            std::string::npos);
  // A named list: "default", and "tool_use" when tools are given.
  const ChatTemplate t = ChatTemplate::load(write(
      "lt_ct_f.json", R"({"chat_template": [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}]})"));
  ChatOptions opt;
  EXPECT_EQ(t.render(OrderedJson::array(), opt), "D");
  opt.tools = OrderedJson::array({{{"type", "function"}}});
  EXPECT_EQ(t.render(OrderedJson::array(), opt), "T");
  EXPECT_NE(error_of([&] { t.render(OrderedJson::object()); }).find("messages must be a JSON list"), std::string::npos);
}

TEST(ChatTemplate, EndOfTurnTokens) {
  EXPECT_EQ(real("llama3").end_of_turn(), std::vector<std::string>{"<|eot_id|>"});
  EXPECT_EQ(real("qwen3").end_of_turn(), std::vector<std::string>{"<|im_end|>"});
  EXPECT_EQ(real("gemma3").end_of_turn(), std::vector<std::string>{"<end_of_turn>"});
  EXPECT_EQ(real("zephyr").end_of_turn(), std::vector<std::string>{"</s>"});
  EXPECT_EQ(real("smollm2").end_of_turn(), std::vector<std::string>{"<|im_end|>"});
}

TEST(ChatTemplate, GenerationPrompt) {
  const OrderedJson msgs = OrderedJson::array({msg("user", "Hi")});
  EXPECT_EQ(real("qwen3").generation_prompt(msgs), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  ChatOptions no_think;
  no_think.kwargs = {{"enable_thinking", false}};
  EXPECT_EQ(real("qwen3").generation_prompt(msgs, no_think),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  EXPECT_EQ(real("gemma3").generation_prompt(msgs), "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(real("zephyr").generation_prompt(msgs), "<|user|>\nHi</s>\n<|assistant|>\n");
}

TEST(ChatTemplate, AssistantSpansExact) {
  const OrderedJson conv = OrderedJson::array(
      {msg("system", "S"), msg("user", "Q1"), msg("assistant", "A1"), msg("user", "Q2"), msg("assistant", "A2")});
  const ChatText q = real("qwen3").render_for_training(conv);
  // Qwen3 renders the last turn with an (empty) think block: it is the assistant's output too.
  EXPECT_EQ(span_texts(q), (std::vector<std::string>{"A1<|im_end|>", "<think>\n\n</think>\n\nA2<|im_end|>"}));
  const ChatText l = real("llama3").render_for_training(conv);
  EXPECT_EQ(span_texts(l), (std::vector<std::string>{"A1<|eot_id|>", "A2<|eot_id|>"}));
  const ChatText g = real("gemma3").render_for_training(OrderedJson::array(
      {msg("user", "Q1"), msg("assistant", " A1 "), msg("user", "Q2"), msg("assistant", "A2")}));
  EXPECT_EQ(span_texts(g), (std::vector<std::string>{"A1<end_of_turn>", "A2<end_of_turn>"}));
  const ChatText z = real("zephyr").render_for_training(conv);
  EXPECT_EQ(span_texts(z), (std::vector<std::string>{"A1</s>", "A2</s>"}));
  // Qwen3 drops the thinking of turns before the last user message, and keeps it after.
  OrderedJson think = msg("assistant", "A2");
  think["reasoning_content"] = "R2";
  const OrderedJson multi = OrderedJson::array(
      {msg("user", "Q1"), msg("assistant", "<think>\nR1\n</think>\n\nA1"), msg("user", "Q2"), think});
  for (bool thinking : {true, false}) {
    ChatOptions opt;
    opt.kwargs = {{"enable_thinking", thinking}};
    EXPECT_EQ(span_texts(real("qwen3").render_for_training(multi, opt)),
              (std::vector<std::string>{"A1<|im_end|>", "<think>\nR2\n</think>\n\nA2<|im_end|>"}));
  }
  // Tool calls sit inside the span; tool results do not.
  OrderedJson call = msg("assistant", "");
  call["tool_calls"] = OrderedJson::array({{{"type", "function"}, {"function", {{"name", "f"}, {"arguments", {{"x", 1}}}}}}});
  const ChatText t = real("qwen3").render_for_training(
      OrderedJson::array({msg("user", "Q"), call, msg("tool", "R"), msg("assistant", "done")}));
  EXPECT_EQ(span_texts(t), (std::vector<std::string>{"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call><|im_end|>",
                                                     "<think>\n\n</think>\n\ndone<|im_end|>"}));
}

TEST(ChatTemplate, PrefixDifferenceRefusesWhatItCannotSee) {
  // A template that numbers turns from the end: no prefix renders as a prefix of the whole.
  ChatTemplate t("{% for m in messages %}[{{ messages|length - loop.index0 }}]{{ m.content }}</s>{% endfor %}"
                 "{% if add_generation_prompt %}[A]{% endif %}",
                 OrderedJson::object(), {"</s>"}, "reversed");
  const std::string e = error_of([&] { t.render_for_training(OrderedJson::array({msg("user", "Q"), msg("assistant", "A")})); });
  EXPECT_NE(e.find("message 1: the conversation rendered up to its generation prompt is not a prefix"), std::string::npos) << e;
}

TEST(ChatTemplate, PrefixDifferenceAgreesWithGenerationBlocks) {
  // smollm2's template marks assistant output with {% generation %}: both ways must agree.
  const auto cases = lt_test::reference_cases("--count 300 --only smollm2");
  ASSERT_EQ(cases.size(), 300u);
  const ChatTemplate t = real("smollm2");
  ASSERT_TRUE(t.has_generation_blocks());
  int with_assistant = 0;
  for (const OrderedJson& c : cases) {
    if (c.contains("error")) continue;
    ChatOptions opt;
    opt.tools = c["tools"];
    opt.now = c["now"].get<std::time_t>();
    const ChatText a = t.render_for_training(c["messages"], opt, SpanMethod::GenerationBlocks);
    const ChatText b = t.render_for_training(c["messages"], opt, SpanMethod::PrefixDifference);
    ASSERT_EQ(a.text, b.text);
    ASSERT_EQ(a.assistant, b.assistant) << c.dump();
    with_assistant += !a.assistant.empty();
  }
  EXPECT_GT(with_assistant, 150);
}

TEST(ChatTemplate, TokensAndMaskWithSpecialTokens) {
  // The committed Qwen2-style tokenizer has <|im_start|> and <|im_end|> as added tokens.
  const auto tok = lt::text::load_tokenizer_json(std::string(LT_TEST_DATA_DIR) + "/tokenizers/qwen2/tokenizer.json");
  const ChatTemplate t = real("smollm2");
  const ChatText c = t.render_for_training(OrderedJson::array({msg("user", "Hi there"), msg("assistant", "Hello, friend")}), {});
  const lt::text::ChatTokens ct = lt::text::tokenize_chat(*tok, c);
  ASSERT_EQ(ct.ids, tok->encode(c.text, false));
  const int32_t im_start = *tok->token_to_id("<|im_start|>"), im_end = *tok->token_to_id("<|im_end|>");
  EXPECT_EQ(std::count(ct.ids.begin(), ct.ids.end(), im_start), 3);  // special tokens are their own ids
  // The masked ids decode to exactly the assistant span.
  std::vector<int32_t> masked;
  for (size_t k = 0; k < ct.ids.size(); ++k)
    if (ct.assistant_mask[k]) masked.push_back(ct.ids[k]);
  EXPECT_EQ(tok->decode(masked, false), "Hello, friend<|im_end|>");
  EXPECT_EQ(masked.back(), im_end);
  EXPECT_EQ(lt::text::stop_ids(*tok, t).front(), im_end);
}

TEST(ChatTemplate, ChatDataLines) {
  using lt::text::parse_chat_example;
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"{nope", "chat data d.jsonl:3: not valid JSON"},
      {"{\"text\": \"x\"}", "the line has no \"messages\""},
      {"{\"messages\": []}", "\"messages\" is not a non-empty list"},
      {"{\"messages\": [3]}", "messages[0]: is not an object"},
      {"{\"messages\": [{\"content\": \"x\"}]}", "messages[0]: has no string \"role\""},
      {"{\"messages\": [{\"role\": \"user\", \"content\": 5}]}", "\"content\" is neither a string"},
      {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": {}}", "\"tools\" is not a list"},
  };
  for (const auto& b : bad) {
    const std::string& line = b.first;
    const std::string& want = b.second;
    const std::string e = error_of([&] { parse_chat_example(line, "d.jsonl:3"); });
    EXPECT_NE(e.find(want), std::string::npos) << line << " -> " << e;
  }
  const auto tok = lt::text::load_tokenizer_json(std::string(LT_TEST_DATA_DIR) + "/tokenizers/qwen2/tokenizer.json");
  const ChatTemplate t = real("qwen3");
  const auto ex = parse_chat_example(R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]})", "d:1");
  ChatOptions opt;
  opt.kwargs = {{"enable_thinking", false}};
  const auto a = lt::text::chat_training_tokens(*tok, t, ex, lt::text::TrainOn::Assistant, opt, "d:1");
  const auto all = lt::text::chat_training_tokens(*tok, t, ex, lt::text::TrainOn::All, opt, "d:1");
  EXPECT_EQ(a.ids, all.ids);
  EXPECT_EQ(std::count(all.assistant_mask.begin(), all.assistant_mask.end(), 1), int64_t(all.ids.size()));
  std::vector<int32_t> masked;
  for (size_t k = 0; k < a.ids.size(); ++k)
    if (a.assistant_mask[k]) masked.push_back(a.ids[k]);
  // enable_thinking=false prompts with the empty think block, so the model's output is the rest.
  EXPECT_EQ(tok->decode(masked, false), "Yo<|im_end|>");
  const auto no_reply = parse_chat_example(R"({"messages": [{"role": "user", "content": "Hi"}]})", "d:2");
  EXPECT_NE(error_of([&] { lt::text::chat_training_tokens(*tok, t, no_reply, lt::text::TrainOn::Assistant, opt, "d:2"); })
                .find("chat data d:2: the conversation has no assistant message"),
            std::string::npos);
}
