#include "text/jinja_filters.h"

#include <algorithm>
#include <cmath>

#include "text/jinja_error.h"
#include "text/jinja_ops.h"

namespace lt::text::jinja {

namespace {

[[noreturn]] void bad_arg(const std::string& filter, const std::string& why) {
  throw RenderError("filter '" + filter + "': " + why);
}

void check_args(const std::string& name, const CallArgs& a, size_t max_pos, std::initializer_list<const char*> kws) {
  if (a.pos.size() > max_pos) bad_arg(name, "too many arguments");
  for (const auto& [k, v] : a.kw) {
    bool ok = false;
    for (const char* w : kws) ok = ok || k == w;
    if (!ok) bad_arg(name, "unexpected keyword argument '" + k + "'");
  }
}

// jinja2's attribute path "a.b.0" for map / selectattr / join(attribute=...).
Value attr_path(const Value& v, const std::string& path) {
  Value cur = v;
  size_t start = 0;
  for (;;) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool digits = !part.empty() && part.size() < 18 &&
                        std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    cur = digits ? get_item(cur, Value::integer(std::stoll(part))) : get_item(cur, Value::string(part));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

std::string soft_str(const Value& v) { return to_str(v); }

Value tojson(const Value& v, CallArgs& a) {
  check_args("tojson", a, 4, {"ensure_ascii", "indent", "separators", "sort_keys"});
  const Value* ea = a.get(0, "ensure_ascii");
  if (ea && truthy(*ea)) bad_arg("tojson", "ensure_ascii=True is not supported");
  const Value* ind = a.get(1, "indent");
  int indent = -1;
  if (ind && !ind->is_none()) {
    if (ind->kind != Kind::Int || ind->i < 0 || ind->i > 64) bad_arg("tojson", "indent must be None or an integer 0..64");
    indent = int(ind->i);
  }
  std::string item_sep = indent >= 0 ? "," : ", ", key_sep = ": ";
  if (const Value* sep = a.get(2, "separators"); sep && !sep->is_none()) {
    if (!sep->is_sequence() || sep->list->size() != 2 || !(*sep->list)[0].is_string() || !(*sep->list)[1].is_string())
      bad_arg("tojson", "separators must be a pair of strings");
    item_sep = (*sep->list)[0].s;
    key_sep = (*sep->list)[1].s;
  }
  const Value* sk = a.get(3, "sort_keys");
  return Value::string(to_json(v, indent, sk && truthy(*sk), item_sep, key_sep));
}

// Python's str.splitlines() separators, for indent.
std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::u32string u = to_u32(s), line;
  for (size_t i = 0; i < u.size(); ++i) {
    const char32_t c = u[i];
    if (c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || (c >= 0x1c && c <= 0x1e) || c == 0x85 || c == 0x2028 ||
        c == 0x2029) {
      if (c == '\r' && i + 1 < u.size() && u[i + 1] == '\n') ++i;
      out.push_back(from_u32(line));
      line.clear();
    } else {
      line += c;
    }
  }
  if (!line.empty()) out.push_back(from_u32(line));
  return out;
}

Value indent_filter(const Value& v, CallArgs& a) {
  check_args("indent", a, 3, {"width", "first", "blank"});
  const Value* w = a.get(0, "width");
  std::string pad = w ? (w->is_string() ? w->s : std::string(size_t(std::max<int64_t>(0, w->i)), ' ')) : "    ";
  const bool first = a.get(1, "first") && truthy(*a.get(1, "first"));
  const bool blank = a.get(2, "blank") && truthy(*a.get(2, "blank"));
  std::vector<std::string> lines = split_lines(soft_str(v) + "\n");
  std::string rv;
  if (blank) {
    for (size_t k = 0; k < lines.size(); ++k) {
      if (k) rv += '\n' + pad;
      rv += lines[k];
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t k = 1; k < lines.size(); ++k) {
      rv += '\n';
      if (!lines[k].empty()) rv += pad + lines[k];
    }
  }
  return Value::string(first ? pad + rv : rv);
}

// select / reject / selectattr / rejectattr: args are (attribute?), test name, test args.
Value select_filter(const std::string& name, const Value& v, CallArgs& a) {
  const bool by_attr = name == "selectattr" || name == "rejectattr";
  const bool keep = name == "select" || name == "selectattr";
  size_t k = 0;
  std::string attr;
  if (by_attr) {
    if (a.pos.empty() || !a.pos[0].is_string()) bad_arg(name, "needs an attribute name");
    attr = a.pos[k++].s;
  }
  std::string test;
  if (k < a.pos.size()) {
    if (!a.pos[k].is_string()) bad_arg(name, "the test must be named by a string");
    test = a.pos[k++].s;
  }
  if (!a.kw.empty()) bad_arg(name, "keyword arguments are not supported");
  CallArgs targs;
  targs.pos.assign(a.pos.begin() + long(k), a.pos.end());
  List out;
  for (const Value& item : iterate(v)) {
    const Value x = by_attr ? attr_path(item, attr) : item;
    const bool hit = test.empty() ? truthy(x) : apply_test(test, x, targs);
    if (hit == keep) out.push_back(item);
  }
  return Value::make_list(std::move(out));
}

Value map_filter(const Value& v, CallArgs& a) {
  List out;
  if (const Value* at = a.get(99, "attribute")) {
    const Value* dflt = a.get(99, "default");
    for (const Value& item : iterate(v)) {
      Value x = attr_path(item, to_str(*at));
      out.push_back(x.is_undefined() && dflt ? *dflt : x);
    }
    return Value::make_list(std::move(out));
  }
  if (a.pos.empty() || !a.pos[0].is_string()) bad_arg("map", "needs a filter name or attribute=");
  CallArgs fargs;
  fargs.pos.assign(a.pos.begin() + 1, a.pos.end());
  fargs.kw = a.kw;
  for (const Value& item : iterate(v)) out.push_back(apply_filter(a.pos[0].s, item, fargs));
  return Value::make_list(std::move(out));
}

}  // namespace

Value apply_filter(const std::string& name, const Value& v, CallArgs& a) {
  if (name == "tojson") return tojson(v, a);
  if (name == "trim") {
    check_args(name, a, 1, {"chars"});
    return Value::string(py_strip(soft_str(v), a.get(0, "chars"), true, true));
  }
  if (name == "length" || name == "count") {
    check_args(name, a, 0, {});
    return Value::integer(length(v));
  }
  if (name == "string") {
    check_args(name, a, 0, {});
    return Value::string(to_str(v));
  }
  if (name == "upper" || name == "lower" || name == "capitalize" || name == "title") {
    check_args(name, a, 0, {});
    return Value::string(py_case(soft_str(v), name));
  }
  if (name == "replace") {
    check_args(name, a, 3, {"old", "new", "count"});
    const Value *o = a.get(0, "old"), *n = a.get(1, "new"), *c = a.get(2, "count");
    if (!o || !n) bad_arg(name, "needs old and new");
    return Value::string(py_replace(soft_str(v), to_str(*o), to_str(*n), c && !c->is_none() ? c->i : -1));
  }
  if (name == "safe") return v;
  if (name == "escape" || name == "e") {
    std::string out;
    for (char c : soft_str(v)) {
      switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&#34;"; break;
        case '\'': out += "&#39;"; break;
        default: out += c;
      }
    }
    return Value::string(out);
  }
  if (name == "default" || name == "d") {
    check_args(name, a, 2, {"default_value", "boolean"});
    const Value* dv = a.get(0, "default_value");
    const bool boolean = a.get(1, "boolean") && truthy(*a.get(1, "boolean"));
    if (v.is_undefined() || (boolean && !truthy(v))) return dv ? *dv : Value::string("");
    return v;
  }
  if (name == "first" || name == "last") {
    check_args(name, a, 0, {});
    std::vector<Value> items = iterate(v);
    if (items.empty()) return Value::undefined("No " + name + " item, sequence was empty.");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") {
    check_args(name, a, 0, {});
    return Value::make_list(iterate(v));
  }
  if (name == "reverse") {
    check_args(name, a, 0, {});
    if (v.is_string()) {
      std::u32string u = to_u32(v.s);
      std::reverse(u.begin(), u.end());
      return Value::string(from_u32(u));
    }
    std::vector<Value> items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::make_list(std::move(items));
  }
  if (name == "join") {
    check_args(name, a, 2, {"d", "attribute"});
    const Value* d = a.get(0, "d");
    const Value* at = a.get(1, "attribute");
    std::string out;
    bool first = true;
    for (const Value& item : iterate(v)) {
      out += (first ? "" : (d ? to_str(*d) : "")) + to_str(at ? attr_path(item, to_str(*at)) : item);
      first = false;
    }
    return Value::string(out);
  }
  if (name == "items") {
    check_args(name, a, 0, {});
    if (v.is_undefined()) return Value::make_list({});
    if (!v.is_mapping()) bad_arg(name, "can only process mappings, not " + type_name(v));
    CallArgs none;
    return (*get_attr(v, "items").fn)(none);
  }
  if (name == "map") return map_filter(v, a);
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr")
    return select_filter(name, v, a);
  if (name == "indent") return indent_filter(v, a);
  if (name == "abs") {
    if (v.kind == Kind::Int) return Value::integer(v.i < 0 ? -v.i : v.i);
    if (v.kind == Kind::Float) return Value::number(std::fabs(v.f));
    bad_arg(name, "bad operand type for abs(): '" + type_name(v) + "'");
  }
  if (name == "int") {
    check_args(name, a, 1, {"default"});
    const Value* dflt = a.get(0, "default");
    if (v.kind == Kind::Int) return v;
    if (v.kind == Kind::Bool) return Value::integer(v.b);
    if (v.kind == Kind::Float && std::isfinite(v.f)) return Value::integer(int64_t(v.f));
    if (v.is_string()) {
      try {
        size_t used = 0;
        std::string t = py_strip(v.s, nullptr, true, true);
        const int64_t x = std::stoll(t, &used);
        if (used == t.size()) return Value::integer(x);
      } catch (const std::exception&) {
      }
    }
    return dflt ? *dflt : Value::integer(0);
  }
  if (name == "float") {
    check_args(name, a, 1, {"default"});
    if (v.is_number()) return Value::number(v.as_double());
    if (v.is_string()) {
      try {
        size_t used = 0;
        std::string t = py_strip(v.s, nullptr, true, true);
        const double x = std::stod(t, &used);
        if (used == t.size()) return Value::number(x);
      } catch (const std::exception&) {
      }
    }
    const Value* dflt = a.get(0, "default");
    return dflt ? *dflt : Value::number(0);
  }
  throw RenderError("the filter '" + name + "' is not supported");
}

bool apply_test(const std::string& name, const Value& v, CallArgs& a) {
  const Value* arg = a.get(0, "other");
  auto need_arg = [&] {
    if (!arg) throw RenderError("the test '" + name + "' needs an argument");
    return *arg;
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_mapping();
  if (name == "sequence") return v.is_sequence() || v.is_string() || v.is_mapping() || v.is_undefined();
  if (name == "iterable") return v.is_sequence() || v.is_string() || v.is_mapping() || v.is_undefined();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind == Kind::Int;
  if (name == "float") return v.kind == Kind::Float;
  if (name == "boolean") return v.kind == Kind::Bool;
  if (name == "true") return v.kind == Kind::Bool && v.b;
  if (name == "false") return v.kind == Kind::Bool && !v.b;
  if (name == "callable") return v.kind == Kind::Callable;
  if (name == "odd" || name == "even") {
    if (v.kind != Kind::Int) throw RenderError("the test '" + name + "' needs an integer");
    return (((v.i % 2) + 2) % 2 == 1) == (name == "odd");
  }
  if (name == "divisibleby") {
    const Value d = need_arg();
    if (v.kind != Kind::Int || d.kind != Kind::Int || d.i == 0) throw RenderError("divisibleby needs non-zero integers");
    return v.i % d.i == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return equal(v, need_arg());
  if (name == "ne" || name == "!=") return !equal(v, need_arg());
  if (name == "lt" || name == "lessthan" || name == "<") return less_than(v, need_arg());
  if (name == "gt" || name == "greaterthan" || name == ">") return less_than(need_arg(), v);
  if (name == "le" || name == "<=") return !less_than(need_arg(), v);
  if (name == "ge" || name == ">=") return !less_than(v, need_arg());
  if (name == "in") return contains(need_arg(), v);
  if (name == "sameas") {
    const Value o = need_arg();
    if (v.kind != o.kind) return false;
    if (v.kind == Kind::None || v.kind == Kind::Undefined) return true;
    if (v.kind == Kind::Bool) return v.b == o.b;
    return (v.list && v.list == o.list) || (v.dict && v.dict == o.dict);
  }
  if (name == "lower" || name == "upper") {
    if (!v.is_string()) return false;
    return py_case(v.s, name) == v.s && py_case(v.s, name == "lower" ? "upper" : "lower") != v.s;
  }
  throw RenderError("the test '" + name + "' is not supported");
}

}  // namespace lt::text::jinja
