#include "text/chat_template.h"

#include <algorithm>
#include <filesystem>

#include "io/input_file.h"
#include "leantrain/error.h"
#include "text/jinja.h"
#include "text/jinja_value.h"

namespace lt::text {

namespace {

// Gemma 3's tokenizer_config.json is 1.2 MB (its added tokens); the limit only stops a wrong file.
constexpr int64_t kMaxTemplateFileBytes = int64_t(64) << 20;
constexpr const char* kChatFix = "docs/user-guide.md (Chat templates) says what leantrain reads";

std::string token_text(const OrderedJson& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return "";
}

}  // namespace

ChatTemplate::ChatTemplate(const std::string& source, OrderedJson special_tokens, std::vector<std::string> special_texts,
                           std::string name, const std::string& tool_use_source)
    : name_(std::move(name)), special_tokens_(std::move(special_tokens)), special_texts_(std::move(special_texts)) {
  tmpl_ = std::make_unique<jinja::Template>(source, name_);
  if (!tool_use_source.empty()) tool_tmpl_ = std::make_unique<jinja::Template>(tool_use_source, name_ + " (tool_use)");
  for (const auto& [k, v] : special_tokens_.items()) {
    if (v.is_string()) special_texts_.push_back(v.get<std::string>());
    if (v.is_array())
      for (const auto& x : v)
        if (x.is_string()) special_texts_.push_back(x.get<std::string>());
  }
  has_generation_ = tmpl_->has_generation_blocks();
  find_end_of_turn();
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

namespace {

// tokenizer_config.json's text as a JSON object ("" reads as {}).
OrderedJson parse_config(const std::string& text, const std::string& name) {
  if (text.empty()) return OrderedJson::object();
  OrderedJson cfg;
  try {
    cfg = OrderedJson::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("chat template: " + name, std::string("not valid JSON: ") + e.what(), "pass the model's tokenizer_config.json");
  }
  LT_CHECK(cfg.is_object(), "chat template: " + name, "the file is not a JSON object", "pass the model's tokenizer_config.json");
  return cfg;
}

// The "default" and "tool_use" templates of a config's chat_template (a string, or a list of
// {name, template}); both empty when it has none.
std::pair<std::string, std::string> config_templates(const OrderedJson& cfg, const std::string& name) {
  std::string source, tool_use;
  if (!cfg.contains("chat_template")) return {};
  const OrderedJson& ct = cfg["chat_template"];
  if (ct.is_string()) return {ct.get<std::string>(), ""};
  LT_CHECK(ct.is_array(), "chat template: " + name, "chat_template is neither a string nor a list", kChatFix);
  for (const auto& t : ct) {
    if (!t.is_object() || !t.contains("name") || !t.contains("template") || !t["template"].is_string())
      fail("chat template: " + name, "chat_template is a list whose items are not {\"name\", \"template\"}", kChatFix);
    if (t["name"] == "default") source = t["template"].get<std::string>();
    if (t["name"] == "tool_use") tool_use = t["template"].get<std::string>();
  }
  LT_CHECK(!source.empty(), "chat template: " + name, "chat_template lists named templates but none is named 'default'",
           kChatFix);
  return {source, tool_use};
}

}  // namespace

ChatTemplate ChatTemplate::load(const std::string& path) {
  const std::string config = io::read_input_file(path, kMaxTemplateFileBytes, "as tokenizer_config.json",
                                                 "pass the model's tokenizer_config.json");
  const auto jinja_file = std::filesystem::path(path).parent_path() / "chat_template.jinja";
  std::string jinja;
  if (std::filesystem::exists(jinja_file))
    jinja = io::read_input_file(jinja_file.string(), kMaxTemplateFileBytes, "as chat_template.jinja", kChatFix);
  return from_config(config, jinja, path);
}

ChatTemplate ChatTemplate::from_config(const std::string& config_text, const std::string& template_text,
                                       const std::string& name) {
  const OrderedJson cfg = parse_config(config_text, name);
  auto [source, tool_use] = config_templates(cfg, name);
  if (!template_text.empty()) {  // chat_template.jinja, or an override: it replaces the default
    source = template_text;
  }
  LT_CHECK(!source.empty(), "chat template: " + name, "there is no chat_template (and no chat_template.jinja beside it)",
           "use a tokenizer_config.json of a chat (instruct) model, or pass --chat-template FILE");
  OrderedJson special = OrderedJson::object();
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"})
    if (cfg.contains(key) && !token_text(cfg[key]).empty()) special[key] = token_text(cfg[key]);
  if (cfg.contains("additional_special_tokens") && cfg["additional_special_tokens"].is_array()) {
    OrderedJson extra = OrderedJson::array();
    for (const auto& t : cfg["additional_special_tokens"])
      if (!token_text(t).empty()) extra.push_back(token_text(t));
    special["additional_special_tokens"] = extra;
  }
  std::vector<std::string> texts;
  if (cfg.contains("added_tokens_decoder") && cfg["added_tokens_decoder"].is_object())
    for (const auto& [id, t] : cfg["added_tokens_decoder"].items())
      if (t.is_object() && t.value("special", false) && !token_text(t).empty()) texts.push_back(token_text(t));
  return ChatTemplate(source, special, texts, name, tool_use);
}

std::string ChatTemplate::template_of_file(const std::string& path) {
  const std::string text = io::read_input_file(path, kMaxTemplateFileBytes, "as a chat template",
                                               "pass a .jinja file or a tokenizer_config.json holding a chat_template");
  if (std::filesystem::path(path).extension() != ".json") return text;  // Jinja text
  const OrderedJson cfg = parse_config(text, path);
  auto [source, tool_use] = config_templates(cfg, path);
  LT_CHECK(!source.empty(), "chat template: " + path, "the JSON file has no chat_template",
           "pass a .jinja file or a tokenizer_config.json holding a chat_template");
  return source;
}

const jinja::Template& ChatTemplate::pick(const ChatOptions& opt) const {
  return tool_tmpl_ && !opt.tools.is_null() ? *tool_tmpl_ : *tmpl_;
}

ChatText ChatTemplate::render_with(const OrderedJson& messages, const ChatOptions& opt, bool add_gen) const {
  LT_CHECK(messages.is_array(), "chat template " + name_, "messages must be a JSON list of {\"role\", \"content\"} objects",
           "pass the conversation's \"messages\" list");
  jinja::Dict vars;
  for (const auto& [k, v] : special_tokens_.items()) vars.set(k, jinja::from_json(v));
  vars.set("messages", jinja::from_json(messages));
  vars.set("tools", opt.tools.is_null() ? jinja::Value::none() : jinja::from_json(opt.tools));
  vars.set("documents", jinja::Value::none());
  vars.set("add_generation_prompt", jinja::Value::boolean(add_gen));
  LT_CHECK(opt.kwargs.is_object(), "chat template " + name_, "the extra template variables must be a JSON object",
           "pass e.g. {\"enable_thinking\": false}");
  for (const auto& [k, v] : opt.kwargs.items()) vars.set(k, jinja::from_json(v));
  jinja::RenderResult r = pick(opt).render(vars, opt.now);
  return {std::move(r.text), std::move(r.generation)};
}

std::string ChatTemplate::render(const OrderedJson& messages, const ChatOptions& opt) const {
  return render_with(messages, opt, opt.add_generation_prompt).text;
}

std::string ChatTemplate::generation_prompt(const OrderedJson& messages, const ChatOptions& opt) const {
  return render_with(messages, opt, true).text;
}

void ChatTemplate::find_end_of_turn() {
  // A probe: what follows the assistant's text in [user, assistant] is the end of its turn.
  const std::string reply = "leantrain-probe-reply";
  OrderedJson msgs = OrderedJson::array({{{"role", "user"}, {"content", "leantrain-probe-question"}},
                                         {{"role", "assistant"}, {"content", reply}}});
  std::string text;
  try {
    text = render_with(msgs, {}, false).text;
  } catch (const Error&) {
    return;  // a template that cannot render the probe has no end-of-turn to offer; spans will fail clearly
  }
  const size_t at = text.rfind(reply);
  if (at == std::string::npos) return;
  const std::string rest = text.substr(at + reply.size());
  std::string best;
  for (const std::string& s : special_texts_)
    if (!s.empty() && rest.compare(0, s.size(), s) == 0 && s.size() > best.size()) best = s;
  if (best.empty()) {
    size_t e = 0;
    while (e < rest.size() && !std::isspace(static_cast<unsigned char>(rest[e]))) ++e;
    best = rest.substr(0, e);
  }
  if (!best.empty()) end_of_turn_.push_back(best);
}

bool ChatTemplate::has_generation_blocks() const { return has_generation_; }

ChatText ChatTemplate::render_for_training(const OrderedJson& messages, const ChatOptions& opt, SpanMethod method) const {
  if (method == SpanMethod::GenerationBlocks || (method == SpanMethod::Auto && has_generation_))
    return render_with(messages, opt, false);
  return prefix_difference(messages, opt);
}

ChatText ChatTemplate::prefix_difference(const OrderedJson& messages, const ChatOptions& opt) const {
  ChatText out;
  out.text = render_with(messages, opt, false).text;
  const std::string where = "chat template " + name_;
  const std::string fix = "docs/decisions.md (Assistant-only loss) explains; train on the whole text or fix the template";
  for (size_t i = 0; i < messages.size(); ++i) {
    const OrderedJson& m = messages[i];
    if (!m.is_object() || m.value("role", "") != "assistant") continue;
    // Start: the end of the generation prompt that precedes this message, when that prompt is a
    // prefix of the whole. Else (Qwen3 prompts with an empty think block under
    // enable_thinking=false that earlier turns do not keep, and re-renders earlier turns without
    // their thinking once a later user message exists) the end of the last copy of the prompt's
    // own text, or of its first line ("<|im_start|>assistant\n"), before the message's content.
    OrderedJson before = OrderedJson::array();
    for (size_t k = 0; k < i; ++k) before.push_back(messages[k]);
    const std::string prompt_text = render_with(before, opt, true).text;
    const std::string plain = render_with(before, opt, false).text;
    const size_t floor = out.assistant.empty() ? 0 : out.assistant.back().second;
    size_t start = std::string::npos;
    if (out.text.compare(0, prompt_text.size(), prompt_text) == 0) {
      start = prompt_text.size();
    } else if (m.contains("content") && m["content"].is_string() && prompt_text.compare(0, plain.size(), plain) == 0) {
      OrderedJson marked = messages;
      marked[i]["content"] = "\xEE\x80\x80" + m["content"].get<std::string>();
      const std::string other = render_with(marked, opt, false).text;
      size_t content_start = 0;
      while (content_start < out.text.size() && content_start < other.size() && out.text[content_start] == other[content_start])
        ++content_start;
      if (other.compare(content_start, 3, "\xEE\x80\x80") != 0) {
        // The content's head is not rendered as given (Qwen3 moves "<think>...</think>" out of
        // it): bound the search by where its end is instead.
        OrderedJson tail = messages;
        tail[i]["content"] = m["content"].get<std::string>() + "\xEE\x80\x80";
        const std::string t2 = render_with(tail, opt, false).text;
        content_start = 0;
        while (content_start < out.text.size() && content_start < t2.size() && out.text[content_start] == t2[content_start])
          ++content_start;
      }
      const std::string header = prompt_text.substr(plain.size());
      for (const std::string& cand : {header, header.substr(0, header.find('\n') + 1)}) {
        if (cand.empty() || cand.size() > content_start) continue;
        const size_t at = out.text.rfind(cand, content_start - cand.size());
        if (at != std::string::npos && at >= floor) {
          start = at + cand.size();
          break;
        }
      }
    }
    LT_CHECK(start != std::string::npos && start >= floor, where,
             "message " + std::to_string(i) +
                 ": the conversation rendered up to its generation prompt is not a prefix of the whole conversation, and the prompt's header is not found before the message",
             fix);
    const std::string prompt = out.text.substr(0, start);
    // The end of its content: where appending a marker to the content first changes the rendering.
    size_t content_end = prompt.size();
    if (m.contains("content") && m["content"].is_string()) {
      OrderedJson marked = messages;
      marked[i]["content"] = m["content"].get<std::string>() + "\xEE\x80\x80";  // U+E000, private use
      const std::string other = render_with(marked, opt, false).text;
      size_t d = 0;
      while (d < out.text.size() && d < other.size() && out.text[d] == other[d]) ++d;
      LT_CHECK(d >= prompt.size(), where,
               "message " + std::to_string(i) + ": its content does not appear after its generation prompt", fix);
      content_end = d;
    }
    // End: the end-of-turn token that closes the turn. Where the conversation up to this message
    // renders as a prefix of the whole, the last one inside that prefix; else (templates that
    // re-render earlier turns, as Qwen3 drops their thinking) the first one after the content.
    OrderedJson through = before;
    through.push_back(m);
    const std::string upto = render_with(through, opt, false).text;
    size_t end = std::string::npos, eot_len = 0;
    if (out.text.compare(0, upto.size(), upto) == 0)
      for (const std::string& e : end_of_turn_) {
        const size_t at = upto.rfind(e);
        if (at != std::string::npos && at >= content_end && (end == std::string::npos || at + e.size() > end + eot_len))
          end = at, eot_len = e.size();
      }
    if (end == std::string::npos)
      for (const std::string& e : end_of_turn_) {
        const size_t at = out.text.find(e, content_end);
        if (at != std::string::npos && at < end) end = at, eot_len = e.size();
      }
    LT_CHECK(end != std::string::npos, where,
             "message " + std::to_string(i) + ": no end-of-turn token follows the assistant's text", fix);
    out.assistant.emplace_back(prompt.size(), end + eot_len);
  }
  return out;
}

ChatTokens tokenize_chat(const Tokenizer& tok, const ChatText& chat) {
  ChatTokens out;
  const std::vector<int32_t> whole = tok.encode(chat.text, /*add_special=*/false);
  // Span by span: the same ids as the whole text wherever each span's edges are token edges
  // (they follow a header and end in a special token in the templates we know).
  size_t pos = 0;
  auto add = [&](size_t b, size_t e, uint8_t flag) {
    if (e <= b) return;
    std::vector<int32_t> part = tok.encode(std::string_view(chat.text).substr(b, e - b), false);
    out.ids.insert(out.ids.end(), part.begin(), part.end());
    out.assistant_mask.insert(out.assistant_mask.end(), part.size(), flag);
  };
  for (const auto& [b, e] : chat.assistant) {
    add(pos, b, 0);
    add(b, e, 1);
    pos = e;
  }
  add(pos, chat.text.size(), 0);
  if (out.ids == whole) return out;
  // Else a token straddles an edge: mark tokens by where they start, finding each token's offset
  // from its text (byte-level tokens that split a character decode only together, so tokens are
  // taken in the smallest groups that spell the text at that point).
  out.ids = whole;
  out.assistant_mask.assign(whole.size(), 0);
  size_t off = 0;
  for (size_t k = 0; k < whole.size();) {
    size_t j = k;
    std::string piece;
    for (; j < whole.size() && j < k + 8; ++j) {
      piece = tok.decode(std::span<const int32_t>(&whole[k], j - k + 1), false);
      if (chat.text.compare(off, piece.size(), piece) == 0) break;
    }
    LT_CHECK(j < whole.size() && j < k + 8, "chat tokens",
             "the tokens do not spell the rendered text back, so an assistant span's edge inside a token cannot be placed",
             "train on the whole text, or use a template whose turns start and end at token edges");
    for (size_t t = k; t <= j; ++t)
      for (const auto& [b, e] : chat.assistant)
        if (off >= b && off < e) out.assistant_mask[t] = 1;
    off += piece.size();
    k = j + 1;
  }
  return out;
}

std::vector<int32_t> stop_ids(const Tokenizer& tok, const ChatTemplate& tmpl) {
  std::vector<int32_t> ids;
  for (const std::string& e : tmpl.end_of_turn())
    if (auto id = tok.token_to_id(e)) ids.push_back(*id);
  if (auto eos = tok.eos_id(); eos && std::find(ids.begin(), ids.end(), *eos) == ids.end()) ids.push_back(*eos);
  return ids;
}

}  // namespace lt::text
