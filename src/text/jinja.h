// A Jinja interpreter for Hugging Face chat templates: the subset of Jinja2 those templates use,
// rendered as transformers' apply_chat_template renders it (jinja2's ImmutableSandboxedEnvironment
// with trim_blocks, lstrip_blocks and loop controls; raise_exception, strftime_now and
// transformers' tojson). docs/user-guide.md (Chat templates) lists the subset.
//
// Everything outside the subset is one lt::Error naming the template and line, never a rendering
// that silently differs from jinja2's.
#pragma once
#include <ctime>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "leantrain/error.h"
#include "text/jinja_value.h"

namespace lt::text::jinja {

struct Stmt;

// raise_exception(message) was called by the template (its message is in why()).
class TemplateException : public Error {
 public:
  using Error::Error;
};

struct RenderResult {
  std::string text;
  // [begin, end) byte ranges of text written inside {% generation %} ... {% endgeneration %}.
  std::vector<std::pair<size_t, size_t>> generation;
};

class Template {
 public:
  // Parses `source`; a syntax error or an unsupported tag is an lt::Error naming `name` and the line.
  Template(const std::string& source, std::string name);
  // Renders with `vars` as the template's variables (messages, tools, bos_token, ...).
  // strftime_now formats `now` (local time), so tests can fix it.
  RenderResult render(const Dict& vars, std::time_t now) const;
  const std::string& name() const { return name_; }
  // Whether any {% generation %} block appears (transformers' assistant-token tracking).
  bool has_generation_blocks() const { return has_generation_; }

 private:
  std::string name_;
  std::vector<std::shared_ptr<Stmt>> body_;
  bool has_generation_ = false;
};

}  // namespace lt::text::jinja
