// JSON lines: one document per line, {"text": "..."} or {"prompt": "...", "response": "..."}
// (the field names are --prompt-field / --response-field), or a file of conversations
// {"messages": [...], "tools": [...]} (when its first line has "messages"). Blank lines are
// skipped; any other line that is not such an object is an error naming file:line, so a typo in
// a field name cannot silently train on nothing.
#include <nlohmann/json.hpp>

#include "data/corpus_builder.h"
#include "data/jsonl_lines.h"
#include "io/unique_keys.h"
#include "leantrain/error.h"

namespace lt::data {

namespace {

class LineError {
 public:
  LineError(const std::string& path, int64_t line) : where_(path + ":" + std::to_string(line)) {}
  [[noreturn]] void operator()(const std::string& why) const {
    fail(where_, why,
         "write one JSON object per line with a string \"text\" field, or string prompt and response fields");
  }

 private:
  std::string where_;
};

std::string quoted(const std::string& s) { return "\"" + s + "\""; }

// "invalid literal" from nlohmann's "[json.exception.parse_error.101] parse error at line 1,
// column 2: syntax error while parsing value - invalid literal; last read: 'x'" (what was read
// is left out: it may be raw bytes).
std::string parse_problem(const std::string& message) {
  size_t from = message.find(" - ");
  if (from == std::string::npos) return "syntax error";
  std::string p = message.substr(from + 3);
  return p.substr(0, p.find(';'));
}

// The field `name` of `obj` if present: a string, or an error.
const std::string* string_field(const nlohmann::json& obj, const std::string& name, const LineError& bad) {
  auto it = obj.find(name);
  if (it == obj.end()) return nullptr;
  if (!it->is_string()) bad("field " + quoted(name) + " is " + std::string(it->type_name()) + ", not a string");
  return it->get_ptr<const std::string*>();
}

Document document_of(const nlohmann::json& j, const TextOptions& opt, const LineError& bad) {
  if (!j.is_object()) bad(std::string("it is a JSON ") + j.type_name() + ", not an object");
  const std::string* text = string_field(j, "text", bad);
  const std::string* prompt = string_field(j, opt.prompt_field, bad);
  const std::string* response = string_field(j, opt.response_field, bad);
  if (text && (prompt || response))
    bad("it has \"text\" and " + quoted(prompt ? opt.prompt_field : opt.response_field) +
        ": a line is one text or one prompt/response pair");
  if (text) return Document(*text);
  if (prompt && response) return Document(*response, *prompt);
  if (prompt || response)
    bad("it has " + quoted(prompt ? opt.prompt_field : opt.response_field) + " but no " +
        quoted(prompt ? opt.response_field : opt.prompt_field));
  bad("it has no \"text\" field and no " + quoted(opt.prompt_field) + "/" + quoted(opt.response_field) + " fields");
}

}  // namespace

nlohmann::json parse_jsonl_line(std::string_view line, const std::function<void(const std::string&)>& bad) {
  nlohmann::json j;
  const io::UniqueKeys keys;
  try {
    j = nlohmann::json::parse(line, keys.callback());
  } catch (const nlohmann::json::parse_error& e) {
    bad("it is not JSON (byte " + std::to_string(e.byte) + " of the line: " + parse_problem(e.what()) + ")");
  } catch (const nlohmann::json::out_of_range& e) {  // e.g. 2E400: valid JSON, but no double holds it
    bad("it holds a number too large for a double (" + std::string(e.what()).substr(std::string(e.what()).find(' ') + 1) + ")");
  } catch (const nlohmann::json::exception& e) {
    bad("it is not JSON leantrain reads (" + std::string(e.what()) + ")");
  }
  if (!keys.duplicate().empty())
    bad("it has the key \"" + keys.duplicate() + "\" twice, and which of the two is meant is a guess");
  return j;
}

void parse_jsonl(const std::string& text, const std::string& path, const TextOptions& opt, size_t batch_bytes,
                 const std::function<void(std::vector<Document>)>& sink) {
  std::vector<Document> batch;
  size_t batch_size = 0;
  std::optional<bool> conversations;  // the file's kind, from its first line
  for_each_jsonl_line(text, [&](std::string_view line, int64_t line_no) {
    const LineError bad(path, line_no);
    const nlohmann::json j = parse_jsonl_line(line, bad);
    const bool has_messages = j.is_object() && j.contains("messages");
    if (!conversations) conversations = has_messages;
    Document d;
    if (*conversations) {
      // Parsed again in key order: templates write tool schemas and arguments as given (tojson).
      const std::string where = path + ":" + std::to_string(line_no);
      d.chat = text::parse_chat_example(std::string(line), where);
      d.where = where;
      batch_size += line.size();
    } else {
      if (has_messages)
        bad("it has \"messages\" (a conversation), and the file's first line is a text: a file holds conversations "
            "or texts, not both");
      d = document_of(j, opt, bad);
      batch_size += d.text.size() + (d.prompt ? d.prompt->size() : 0);
    }
    batch.push_back(std::move(d));
    if (batch_size >= batch_bytes) {
      sink(std::move(batch));
      batch.clear();
      batch_size = 0;
    }
  });
  if (!batch.empty()) sink(std::move(batch));
}

}  // namespace lt::data
