#include "text/jinja_ops.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "text/jinja_error.h"
#include "text/jinja_lexer.h"
#include "text/utf8.h"

namespace lt::text::jinja {

std::u32string to_u32(const std::string& s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); i += utf8_char_len(static_cast<unsigned char>(s[i]))) out += utf8_decode_at(s, i);
  return out;
}

std::string from_u32(const std::u32string& s) {
  std::string out;
  for (char32_t c : s) utf8_append(out, c);
  return out;
}

void undefined_error(const Value& v) { throw RenderError(v.s.empty() ? "an undefined value was used" : v.s); }

namespace {

[[noreturn]] void type_error(const std::string& why) { throw RenderError("TypeError: " + why); }

const std::string& str_arg(const Value* v, const char* method) {
  if (!v || !v->is_string()) type_error(std::string(method) + "() needs a string argument");
  return v->s;
}

int64_t int_arg(const Value* v, int64_t dflt, const char* method) {
  if (!v || v->is_none()) return dflt;
  if (v->kind != Kind::Int) type_error(std::string(method) + "() needs an integer argument");
  return v->i;
}

// str.startswith / endswith with a string or a tuple of strings.
bool affix(const std::string& s, const Value* arg, bool start, const char* method) {
  if (!arg) type_error(std::string(method) + "() takes at least 1 argument (0 given)");
  std::vector<Value> options = arg->is_sequence() ? *arg->list : std::vector<Value>{*arg};
  for (const Value& o : options) {
    const std::string& a = str_arg(&o, method);
    if (a.size() <= s.size() && (start ? s.compare(0, a.size(), a) : s.compare(s.size() - a.size(), a.size(), a)) == 0)
      return true;
  }
  return false;
}

void no_extra(const CallArgs& args, size_t max_pos, const std::string& method) {
  if (args.pos.size() > max_pos) type_error(method + "() takes at most " + std::to_string(max_pos) + " arguments");
}

Value str_method(const std::string& s, const std::string& name) {
  auto m = [&](Function f) { return Value::callable("str." + name, std::move(f)); };
  if (name == "startswith" || name == "endswith") {
    const bool start = name == "startswith";
    return m([s, start, name](CallArgs& a) {
      if (a.pos.size() > 1 || !a.kw.empty()) type_error(name + "() with start/end positions is not supported");
      return Value::boolean(affix(s, a.get(0, "prefix"), start, name.c_str()));
    });
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool l = name != "rstrip", r = name != "lstrip";
    return m([s, l, r, name](CallArgs& a) {
      no_extra(a, 1, name);
      return Value::string(py_strip(s, a.get(0, "chars"), l, r));
    });
  }
  if (name == "split") {
    return m([s](CallArgs& a) {
      no_extra(a, 2, "split");
      List parts;
      for (auto& p : py_split(s, a.get(0, "sep"), int_arg(a.get(1, "maxsplit"), -1, "split")))
        parts.push_back(Value::string(p));
      return Value::make_list(std::move(parts));
    });
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    return m([s, name](CallArgs& a) {
      no_extra(a, 0, name);
      return Value::string(py_case(s, name));
    });
  }
  if (name == "replace") {
    return m([s](CallArgs& a) {
      no_extra(a, 3, "replace");
      return Value::string(py_replace(s, str_arg(a.get(0, "old"), "replace"), str_arg(a.get(1, "new"), "replace"),
                                      int_arg(a.get(2, "count"), -1, "replace")));
    });
  }
  if (name == "join") {
    return m([s](CallArgs& a) {
      no_extra(a, 1, "join");
      if (!a.get(0, "iterable")) type_error("join() takes exactly one argument");
      std::string out;
      bool first = true;
      for (const Value& v : iterate(*a.get(0, "iterable"))) {
        if (!v.is_string()) type_error("sequence item: expected str instance, " + type_name(v) + " found");
        out += (first ? "" : s) + v.s;
        first = false;
      }
      return Value::string(out);
    });
  }
  if (name == "find" || name == "count") {
    return m([s, name](CallArgs& a) {
      no_extra(a, 1, name);
      const std::string& sub = str_arg(a.get(0, "sub"), name.c_str());
      if (name == "find") {
        const size_t at = s.find(sub);
        return Value::integer(at == std::string::npos ? -1 : int64_t(utf8_count(s.substr(0, at))));
      }
      if (sub.empty()) return Value::integer(int64_t(utf8_count(s)) + 1);
      int64_t n = 0;
      for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
      return Value::integer(n);
    });
  }
  throw RenderError("the string method '" + name + "' is not supported");
}

Value dict_method(const Value& d, const std::string& name) {
  auto m = [&](Function f) { return Value::callable("dict." + name, std::move(f)); };
  if (name == "items" || name == "keys" || name == "values") {
    return m([d, name](CallArgs& a) {
      no_extra(a, 0, name);
      List out;
      for (const auto& [k, v] : d.dict->items) {
        if (name == "items") out.push_back(Value::make_list({Value::string(k), v}, true));
        else out.push_back(name == "keys" ? Value::string(k) : v);
      }
      return Value::make_list(std::move(out));
    });
  }
  if (name == "get") {
    return m([d](CallArgs& a) {
      no_extra(a, 2, "get");
      const Value* key = a.get(0, "key");
      if (!key) type_error("get expected at least 1 argument, got 0");
      const Value* found = key->is_string() ? d.dict->find(key->s) : nullptr;
      if (found) return *found;
      const Value* dflt = a.get(1, "default");
      return dflt ? *dflt : Value::none();
    });
  }
  throw RenderError("access to the dict method '" + name + "' is unsafe in the sandbox (or not supported)");
}

bool is_dict_method(const std::string& n) {
  return n == "items" || n == "keys" || n == "values" || n == "get" || n == "pop" || n == "popitem" ||
         n == "update" || n == "setdefault" || n == "clear" || n == "copy" || n == "fromkeys";
}

// Python's slice.indices(): the start, stop and step over a sequence of length n.
void slice_indices(int64_t n, const Value* start, const Value* stop, const Value* step, int64_t& b, int64_t& e,
                   int64_t& s) {
  auto get = [](const Value* v, bool& present) -> int64_t {
    present = v && !v->is_none();
    if (!present) return 0;
    if (v->kind != Kind::Int) type_error("slice indices must be integers or None");
    return v->i;
  };
  bool has;
  s = get(step, has);
  if (!has) s = 1;
  if (s == 0) throw RenderError("ValueError: slice step cannot be zero");
  auto clamp = [&](const Value* v, int64_t dflt) {
    bool present;
    int64_t x = get(v, present);
    if (!present) return dflt;
    if (x < 0) x += n;
    if (s > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  b = clamp(start, s > 0 ? 0 : n - 1);
  e = clamp(stop, s > 0 ? n : -1);
}

}  // namespace

Value get_attr(const Value& obj, const std::string& name) {
  if (name.rfind("_", 0) == 0) throw RenderError("access to attribute '" + name + "' is unsafe in the sandbox");
  switch (obj.kind) {
    case Kind::Undefined: undefined_error(obj);
    case Kind::Dict:
      if (is_dict_method(name)) return dict_method(obj, name);
      if (const Value* v = obj.dict->find(name)) return *v;
      return Value::undefined("'dict object' has no attribute '" + name + "'");
    case Kind::Namespace:
      if (const Value* v = obj.dict->find(name)) return *v;
      return Value::undefined("'Namespace' object has no attribute '" + name + "'");
    case Kind::String: {
      static const char* methods[] = {"startswith", "endswith", "strip", "lstrip", "rstrip", "split", "upper",
                                      "lower", "title", "capitalize", "replace", "join", "find", "count"};
      for (const char* m : methods)
        if (name == m) return str_method(obj.s, name);
      static const char* unsupported[] = {"casefold", "center", "encode", "expandtabs", "format", "format_map", "index",
                                          "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier",
                                          "islower", "isnumeric", "isprintable", "isspace", "istitle", "isupper",
                                          "ljust", "maketrans", "partition", "removeprefix", "removesuffix", "rfind",
                                          "rindex", "rjust", "rpartition", "rsplit", "splitlines", "swapcase",
                                          "translate", "zfill"};
      for (const char* m : unsupported)
        if (name == m) throw RenderError("the string method '" + name + "' is not supported");
      return Value::undefined("'str object' has no attribute '" + name + "'");
    }
    case Kind::List: case Kind::Tuple:
      if (name == "append" || name == "extend" || name == "insert" || name == "pop" || name == "remove" ||
          name == "sort" || name == "reverse" || name == "clear")
        throw RenderError("access to attribute '" + name + "' of '" + type_name(obj) +
                          "' object is unsafe (the sandbox forbids changing a list)");
      [[fallthrough]];
    default: return Value::undefined("'" + type_name(obj) + " object' has no attribute '" + name + "'");
  }
}

Value get_item(const Value& obj, const Value& key) {
  switch (obj.kind) {
    case Kind::Undefined: undefined_error(obj);
    case Kind::Dict: case Kind::Namespace:
      if (key.is_string()) {
        if (const Value* v = obj.dict->find(key.s)) return *v;
        return obj.kind == Kind::Dict && is_dict_method(key.s) ? get_attr(obj, key.s)
                                                                : Value::undefined("'dict object' has no attribute '" + key.s + "'");
      }
      return Value::undefined("'dict object' has no attribute '" + to_str(key) + "'");
    case Kind::List: case Kind::Tuple: case Kind::String: {
      if (key.kind == Kind::String) return get_attr(obj, key.s);
      if (key.kind != Kind::Int && key.kind != Kind::Bool) type_error(type_name(obj) + " indices must be integers");
      int64_t i = key.kind == Kind::Bool ? key.b : key.i;
      if (obj.kind == Kind::String) {
        std::u32string u = to_u32(obj.s);
        if (i < 0) i += int64_t(u.size());
        if (i < 0 || i >= int64_t(u.size())) return Value::undefined(type_name(obj) + " index out of range");
        return Value::string(from_u32(u.substr(size_t(i), 1)));
      }
      const int64_t n = int64_t(obj.list->size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined("'" + type_name(obj) + " object' has no element " + to_str(key));
      return (*obj.list)[size_t(i)];
    }
    default:
      if (key.is_string()) return get_attr(obj, key.s);
      return Value::undefined("'" + type_name(obj) + " object' has no element " + to_str(key));
  }
}

Value get_slice(const Value& obj, const Value* start, const Value* stop, const Value* step) {
  if (obj.is_undefined()) undefined_error(obj);
  int64_t b, e, s;
  if (obj.kind == Kind::String) {
    std::u32string u = to_u32(obj.s), out;
    slice_indices(int64_t(u.size()), start, stop, step, b, e, s);
    for (int64_t i = b; s > 0 ? i < e : i > e; i += s) out += u[size_t(i)];
    return Value::string(from_u32(out));
  }
  if (!obj.is_sequence()) type_error("'" + type_name(obj) + "' object is not subscriptable");
  slice_indices(int64_t(obj.list->size()), start, stop, step, b, e, s);
  List out;
  for (int64_t i = b; s > 0 ? i < e : i > e; i += s) out.push_back((*obj.list)[size_t(i)]);
  return Value::make_list(std::move(out), obj.kind == Kind::Tuple);
}

namespace {

int64_t as_int(const Value& v) { return v.kind == Kind::Bool ? int64_t(v.b) : v.i; }

Value int_result(bool overflow, int64_t r) {
  if (overflow) throw RenderError("an integer result beyond 64 bits (Python's integers are unbounded; leantrain's are not)");
  return Value::integer(r);
}

double py_fmod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

}  // namespace

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") return Value::string(to_str(a) + to_str(b));
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  if (a.is_number() && b.is_number()) {
    const bool ints = a.kind != Kind::Float && b.kind != Kind::Float;
    int64_t r = 0;
    if (ints && op != "/" && op != "**") {
      const int64_t x = as_int(a), y = as_int(b);
      if (op == "+") {
        const bool over = __builtin_add_overflow(x, y, &r);
        return int_result(over, r);
      }
      if (op == "-") {
        const bool over = __builtin_sub_overflow(x, y, &r);
        return int_result(over, r);
      }
      if (op == "*") {
        const bool over = __builtin_mul_overflow(x, y, &r);
        return int_result(over, r);
      }
      if (y == 0) throw RenderError("ZeroDivisionError: integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) return int_result(true, 0);
      if (op == "//") return Value::integer(x / y - ((x % y != 0) && ((x < 0) != (y < 0))));
      if (op == "%") {
        int64_t m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        return Value::integer(m);
      }
    }
    if (ints && op == "**") {
      const int64_t x = as_int(a), y = as_int(b);
      if (y < 0) return Value::number(std::pow(double(x), double(y)));
      if (x == 0 || x == 1) return Value::integer(y == 0 ? 1 : x);
      if (x == -1) return Value::integer(y % 2 ? -1 : 1);
      int64_t acc = 1;  // |x| >= 2 overflows within 64 steps
      for (int64_t k = 0; k < y; ++k)
        if (__builtin_mul_overflow(acc, x, &acc)) return int_result(true, 0);
      return Value::integer(acc);
    }
    const double x = a.as_double(), y = b.as_double();
    if (op == "+") return Value::number(x + y);
    if (op == "-") return Value::number(x - y);
    if (op == "*") return Value::number(x * y);
    if (op == "**") return Value::number(std::pow(x, y));
    if (y == 0) throw RenderError("ZeroDivisionError: division by zero");
    if (op == "/") return Value::number(x / y);
    if (op == "//") return Value::number(std::floor(x / y));
    if (op == "%") return Value::number(py_fmod(x, y));
  }
  if (op == "+" && a.is_string() && b.is_string()) return Value::string(a.s + b.s);
  if (op == "+" && a.kind == b.kind && a.is_sequence()) {
    List out = *a.list;
    out.insert(out.end(), b.list->begin(), b.list->end());
    return Value::make_list(std::move(out), a.kind == Kind::Tuple);
  }
  if (op == "*" && (a.is_string() || a.is_sequence()) && (b.kind == Kind::Int || b.kind == Kind::Bool)) {
    const int64_t n = std::max<int64_t>(0, as_int(b));
    if (a.is_string()) {
      std::string out;
      for (int64_t k = 0; k < n; ++k) out += a.s;
      return Value::string(out);
    }
    List out;
    for (int64_t k = 0; k < n; ++k) out.insert(out.end(), a.list->begin(), a.list->end());
    return Value::make_list(std::move(out), a.kind == Kind::Tuple);
  }
  if (op == "%" && a.is_string()) throw RenderError("'%' string formatting is not supported");
  type_error("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
}

bool less_than(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return a.as_double() < b.as_double();
  if (a.is_string() && b.is_string()) return a.s < b.s;  // UTF-8 byte order is code point order
  if (a.is_sequence() && b.is_sequence()) {
    for (size_t k = 0; k < a.list->size() && k < b.list->size(); ++k) {
      if (equal((*a.list)[k], (*b.list)[k])) continue;
      return less_than((*a.list)[k], (*b.list)[k]);
    }
    return a.list->size() < b.list->size();
  }
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  type_error("'<' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind) {
    case Kind::Undefined: return false;
    case Kind::String:
      if (!item.is_string()) type_error("'in <string>' requires string as left operand, not " + type_name(item));
      return container.s.find(item.s) != std::string::npos;
    case Kind::List: case Kind::Tuple:
      for (const Value& v : *container.list)
        if (equal(v, item)) return true;
      return false;
    case Kind::Dict:
      return item.is_string() && container.dict->find(item.s) != nullptr;
    default: type_error("argument of type '" + type_name(container) + "' is not iterable");
  }
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return {};
    case Kind::List: case Kind::Tuple: return *v.list;
    case Kind::Dict: {
      std::vector<Value> keys;
      for (const auto& kv : v.dict->items) keys.push_back(Value::string(kv.first));
      return keys;
    }
    case Kind::String: {
      std::vector<Value> chars;
      for (size_t i = 0; i < v.s.size();) {
        const size_t n = utf8_char_len(static_cast<unsigned char>(v.s[i]));
        chars.push_back(Value::string(v.s.substr(i, n)));
        i += n;
      }
      return chars;
    }
    default: type_error("'" + type_name(v) + "' object is not iterable");
  }
}

int64_t length(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return 0;
    case Kind::String: return int64_t(utf8_count(v.s));
    case Kind::List: case Kind::Tuple: return int64_t(v.list->size());
    case Kind::Dict: return int64_t(v.dict->items.size());
    default: type_error("object of type '" + type_name(v) + "' has no len()");
  }
}

std::string py_strip(const std::string& s, const Value* chars, bool left, bool right) {
  std::u32string u = to_u32(s), set;
  const bool ws = !chars || chars->is_none();
  if (!ws) set = to_u32(str_arg(chars, "strip"));
  auto strip_it = [&](char32_t c) { return ws ? py_isspace(c) : set.find(c) != std::u32string::npos; };
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && strip_it(u[b])) ++b;
  if (right)
    while (e > b && strip_it(u[e - 1])) --e;
  return from_u32(u.substr(b, e - b));
}

std::vector<std::string> py_split(const std::string& s, const Value* sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (!sep || sep->is_none()) {
    std::u32string u = to_u32(s);
    size_t i = 0;
    while (i < u.size()) {
      while (i < u.size() && py_isspace(u[i])) ++i;
      if (i == u.size()) break;
      if (maxsplit >= 0 && int64_t(out.size()) == maxsplit) {
        size_t e = u.size();
        while (e > i && py_isspace(u[e - 1])) --e;
        out.push_back(from_u32(u.substr(i, e - i)));
        return out;
      }
      size_t j = i;
      while (j < u.size() && !py_isspace(u[j])) ++j;
      out.push_back(from_u32(u.substr(i, j - i)));
      i = j;
    }
    return out;
  }
  const std::string& d = str_arg(sep, "split");
  if (d.empty()) throw RenderError("ValueError: empty separator");
  size_t start = 0;
  for (size_t at = s.find(d); at != std::string::npos && (maxsplit < 0 || int64_t(out.size()) < maxsplit);
       at = s.find(d, start)) {
    out.push_back(s.substr(start, at - start));
    start = at + d.size();
  }
  out.push_back(s.substr(start));
  return out;
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count) {
  std::string out;
  if (old.empty()) {  // Python inserts `repl` before every character and at the end
    int64_t n = 0;
    size_t i = 0;
    for (; i < s.size() && (count < 0 || n < count); ++n) {
      out += repl;
      const size_t k = utf8_char_len(static_cast<unsigned char>(s[i]));
      out.append(s, i, k);
      i += k;
    }
    if (i == s.size() && (count < 0 || n < count)) out += repl;
    return out + s.substr(i);
  }
  size_t start = 0;
  int64_t n = 0;
  for (size_t at = s.find(old); at != std::string::npos && (count < 0 || n < count); at = s.find(old, start), ++n) {
    out.append(s, start, at - start);
    out += repl;
    start = at + old.size();
  }
  return out + s.substr(start);
}

std::string py_case(const std::string& s, const std::string& how) {
  for (unsigned char c : s)
    if (c >= 0x80)
      throw RenderError(how + "() of text with non-ASCII characters is not supported (leantrain's case mapping is ASCII-only)");
  std::string out = s;
  bool prev_cased = false;
  for (size_t i = 0; i < out.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(out[i]);
    if (how == "upper") out[i] = char(std::toupper(c));
    else if (how == "lower") out[i] = char(std::tolower(c));
    else if (how == "capitalize") out[i] = char(i == 0 ? std::toupper(c) : std::tolower(c));
    else {  // title: a letter after a non-letter starts a word
      out[i] = char(prev_cased ? std::tolower(c) : std::toupper(c));
      prev_cased = std::isalpha(c);
    }
  }
  return out;
}

}  // namespace lt::text::jinja
