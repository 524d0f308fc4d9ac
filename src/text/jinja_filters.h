// jinja2's filters and tests as chat templates use them, with transformers' tojson (json.dumps
// with ensure_ascii=False and its indent / separators / sort_keys). A filter or test outside this
// set is a RenderError naming it.
#pragma once
#include <string>

#include "text/jinja_value.h"

namespace lt::text::jinja {

Value apply_filter(const std::string& name, const Value& v, CallArgs& args);
bool apply_test(const std::string& name, const Value& v, CallArgs& args);

}  // namespace lt::text::jinja
