// Chat templates: a conversation ({"role", "content", ...} messages, optional tools) rendered by
// the model's tokenizer_config.json `chat_template` exactly as transformers'
// apply_chat_template renders it, plus what training and `generate --chat` need from it:
// which characters (and tokens) are the assistant's output, the generation prompt, and the
// template's end-of-turn token(s). docs/decisions.md (Assistant-only loss) says how the
// assistant spans are found and where that fails.
#pragma once
#include <cstdint>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "text/tokenizer.h"

namespace lt::text {

namespace jinja {
class Template;
}

using OrderedJson = nlohmann::ordered_json;

struct ChatOptions {
  bool add_generation_prompt = false;
  OrderedJson tools;                             // null: no tools (the template sees None)
  OrderedJson kwargs = OrderedJson::object();    // extra variables, e.g. {"enable_thinking": false}
  std::time_t now = std::time(nullptr);          // what strftime_now formats
};

// Rendered text and the [begin, end) byte ranges of it that are the assistant's output.
struct ChatText {
  std::string text;
  std::vector<std::pair<size_t, size_t>> assistant;
};

// Token ids and, per id, 1 when it belongs to the assistant's output.
struct ChatTokens {
  std::vector<int32_t> ids;
  std::vector<uint8_t> assistant_mask;
};

// How render_for_training finds the assistant's spans. Auto: the template's own
// {% generation %} blocks when it has any (as TRL's assistant_only_loss reads them), else the
// prefix difference (docs/decisions.md, Assistant-only loss).
enum class SpanMethod { Auto, GenerationBlocks, PrefixDifference };

class ChatTemplate {
 public:
  // The template of a tokenizer_config.json (a string, or a list of {name, template} where
  // "default" is taken, or "tool_use" when tools are given); chat_template.jinja beside the file,
  // when there is one, replaces the default (transformers gives it priority). bos_token,
  // eos_token, ... and additional_special_tokens become the template's variables as transformers'
  // special_tokens_map passes them. Errors name the file.
  static ChatTemplate load(const std::string& tokenizer_config_path);
  // The same from the files' text held in memory: tokenizer_config.json's (`config_text`, "" when
  // there is none: no special tokens), and `template_text`, when not empty, replacing the config's
  // default template (chat_template.jinja's text, or a --chat-template override). `name` for errors.
  static ChatTemplate from_config(const std::string& config_text, const std::string& template_text,
                                  const std::string& name);
  // The template a --chat-template FILE names: the default chat_template of a .json file (a
  // tokenizer_config.json), else the file's text (a .jinja file). Errors name the file.
  static std::string template_of_file(const std::string& path);

  // `special_tokens`: {"bos_token": "<s>", ...} passed to the template as variables;
  // `special_texts`: every special (added) token's text, to recognise end-of-turn tokens.
  ChatTemplate(const std::string& source, OrderedJson special_tokens, std::vector<std::string> special_texts,
               std::string name, const std::string& tool_use_source = "");
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // apply_chat_template(messages, tools=..., add_generation_prompt=..., tokenize=False, **kwargs).
  std::string render(const OrderedJson& messages, const ChatOptions& opt = {}) const;

  // The whole conversation (add_generation_prompt is ignored: false) and the assistant spans:
  // from the end of the generation prompt before each assistant message to the end of its
  // end-of-turn token, tool calls included. Templates with {% generation %} blocks give theirs.
  // An lt::Error naming the message where neither the prefix difference nor its fallback for
  // templates that re-render earlier turns (Qwen3) can place a span (docs/decisions.md).
  ChatText render_for_training(const OrderedJson& messages, const ChatOptions& opt = {},
                               SpanMethod method = SpanMethod::Auto) const;
  // Whether the template marks assistant output with {% generation %} blocks.
  bool has_generation_blocks() const;

  // The prompt `generate --chat` continues: render(messages) with add_generation_prompt=true.
  std::string generation_prompt(const OrderedJson& messages, const ChatOptions& opt = {}) const;

  // The text(s) that end an assistant turn ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "</s>"),
  // found by rendering a one-turn probe conversation; generation stops at any of them.
  const std::vector<std::string>& end_of_turn() const { return end_of_turn_; }

  const std::string& name() const { return name_; }

 private:
  ChatText render_with(const OrderedJson& messages, const ChatOptions& opt, bool add_generation_prompt) const;
  ChatText prefix_difference(const OrderedJson& messages, const ChatOptions& opt) const;
  const jinja::Template& pick(const ChatOptions& opt) const;
  void find_end_of_turn();

  std::string name_;
  std::unique_ptr<jinja::Template> tmpl_, tool_tmpl_;
  OrderedJson special_tokens_;
  std::vector<std::string> special_texts_;
  std::vector<std::string> end_of_turn_;
  bool has_generation_ = false;
};

// Ids of the rendered text (encode(text, add_special=false), as apply_chat_template tokenizes) and
// the assistant mask: a token is the assistant's when it starts inside an assistant span.
ChatTokens tokenize_chat(const Tokenizer& tok, const ChatText& chat);

// The ids generation stops at: each end-of-turn text that is one token, and the tokenizer's EOS.
std::vector<int32_t> stop_ids(const Tokenizer& tok, const ChatTemplate& tmpl);

}  // namespace lt::text
