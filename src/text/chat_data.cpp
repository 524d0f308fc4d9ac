#include "text/chat_data.h"

#include "leantrain/error.h"
#include "text/json_read.h"

namespace lt::text {

namespace {

constexpr const char* kChatDataFix =
    "each line must be {\"messages\": [{\"role\": \"user\", \"content\": \"...\"}, ...]} with optional \"tools\": [...]";

}  // namespace

ChatExample parse_chat_example(const std::string& line, const std::string& where) {
  OrderedJson j;
  try {
    j = OrderedJson::parse(line);
  } catch (const nlohmann::json::exception& e) {
    fail("chat data " + where, std::string("not valid JSON: ") + printable(e.what()), kChatDataFix);
  }
  LT_CHECK(j.is_object() && j.contains("messages"), "chat data " + where, "the line has no \"messages\"", kChatDataFix);
  ChatExample ex;
  ex.messages = j["messages"];
  LT_CHECK(ex.messages.is_array() && !ex.messages.empty(), "chat data " + where, "\"messages\" is not a non-empty list",
           kChatDataFix);
  for (size_t i = 0; i < ex.messages.size(); ++i) {
    const OrderedJson& m = ex.messages[i];
    const std::string at = "chat data " + where + ": messages[" + std::to_string(i) + "]";
    LT_CHECK(m.is_object(), at, "is not an object", kChatDataFix);
    LT_CHECK(m.contains("role") && m["role"].is_string(), at, "has no string \"role\"", kChatDataFix);
    LT_CHECK(!m.contains("content") || m["content"].is_string() || m["content"].is_array() || m["content"].is_null(), at,
             "\"content\" is neither a string, a list of parts nor null", kChatDataFix);
    LT_CHECK(!m.contains("tool_calls") || m["tool_calls"].is_array(), at, "\"tool_calls\" is not a list", kChatDataFix);
  }
  if (j.contains("tools") && !j["tools"].is_null()) {
    LT_CHECK(j["tools"].is_array(), "chat data " + where, "\"tools\" is not a list", kChatDataFix);
    ex.tools = j["tools"];
  }
  return ex;
}

ChatTokens chat_training_tokens(const Tokenizer& tok, const ChatTemplate& tmpl, const ChatExample& ex, TrainOn on,
                                const ChatOptions& opt, const std::string& where) {
  ChatOptions o = opt;
  o.add_generation_prompt = false;
  o.tools = ex.tools;
  ChatText text;
  ChatTokens t;
  // The template's and the tokenizer's errors name the template; say which example it was given.
  try {
    if (on == TrainOn::All) {
      t.ids = tok.encode(tmpl.render(ex.messages, o), false);
      t.assistant_mask.assign(t.ids.size(), 1);
      return t;
    }
    text = tmpl.render_for_training(ex.messages, o);
    if (!text.assistant.empty()) t = tokenize_chat(tok, text);
  } catch (const Error& e) {
    throw Error("chat data " + where + ": " + e.what_part(), e.why(), e.fix());
  }
  LT_CHECK(!text.assistant.empty(), "chat data " + where,
           "the conversation has no assistant message, so no token would carry loss",
           "add the assistant's reply, or train on all tokens (--train-on all)");
  return t;
}

}  // namespace lt::text
