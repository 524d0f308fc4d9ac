// The error a template raises while it is parsed or rendered, before the interpreter adds the
// template's name and line and turns it into one lt::Error.
#pragma once
#include <stdexcept>
#include <string>

namespace lt::text::jinja {

struct RenderError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// raise_exception(message) in a template: the template's own message, kept apart so that callers
// (and tests) can tell it from a construct leantrain does not support.
struct TemplateRaised : RenderError {
  using RenderError::RenderError;
};

}  // namespace lt::text::jinja
