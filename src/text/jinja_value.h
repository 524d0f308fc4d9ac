// The values a chat template computes with: Python's objects as jinja2 sees them (None, bool,
// int, float, str, list, tuple, dict in insertion order), jinja2's Undefined, namespace() objects
// and callables (macros, globals, bound methods). Lists and dicts are shared, not copied: the
// sandbox forbids mutating them, so sharing is safe, and a namespace's attributes must be shared
// across the scopes that see it.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace lt::text::jinja {

struct Value;
using List = std::vector<Value>;

// A dict keyed by strings, in insertion order (Python 3.7+ dicts; tojson and items() keep it).
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value v);
};

struct CallArgs;
using Function = std::function<Value(CallArgs&)>;

enum class Kind { Undefined, None, Bool, Int, Float, String, List, Tuple, Dict, Namespace, Callable };

struct Value {
  Kind kind = Kind::Undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;                 // String; for Undefined, the name that was missing (for messages)
  std::shared_ptr<List> list;    // List, Tuple
  std::shared_ptr<Dict> dict;    // Dict, Namespace
  std::shared_ptr<Function> fn;  // Callable; s holds its name

  static Value undefined(std::string name = "") { Value v; v.s = std::move(name); return v; }
  static Value none() { Value v; v.kind = Kind::None; return v; }
  static Value boolean(bool x) { Value v; v.kind = Kind::Bool; v.b = x; return v; }
  static Value integer(int64_t x) { Value v; v.kind = Kind::Int; v.i = x; return v; }
  static Value number(double x) { Value v; v.kind = Kind::Float; v.f = x; return v; }
  static Value string(std::string x) { Value v; v.kind = Kind::String; v.s = std::move(x); return v; }
  static Value make_list(List items, bool tuple = false);
  static Value make_dict(Dict d = {});
  static Value callable(std::string name, Function f);

  bool is_undefined() const { return kind == Kind::Undefined; }
  bool is_none() const { return kind == Kind::None; }
  bool is_string() const { return kind == Kind::String; }
  bool is_number() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }
  bool is_sequence() const { return kind == Kind::List || kind == Kind::Tuple; }
  bool is_mapping() const { return kind == Kind::Dict; }
  double as_double() const { return kind == Kind::Float ? f : kind == Kind::Bool ? double(b) : double(i); }
};

// Arguments of a call: positional, then keyword, in the order written.
struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  // pos[i], else the keyword `name`, else `dflt`; an unknown keyword is caught by the callee.
  const Value* get(size_t i, const char* name) const;
};

// Python's truth value (jinja2's for Undefined: false).
bool truthy(const Value& v);
// Python's str() (Undefined prints as ""), and repr() for the items of printed lists and dicts.
std::string to_str(const Value& v);
std::string repr(const Value& v);
// Python's float repr: the shortest text that reads back, "1e+20", "1.0", "inf", "nan".
std::string float_repr(double x);
// ==, as Python compares (1 == 1.0 == True; lists and dicts item by item).
bool equal(const Value& a, const Value& b);
// The type name Python would print in a TypeError ("str", "int", "list", "dict", "NoneType").
std::string type_name(const Value& v);

// JSON in and out: messages and tools arrive as JSON; tojson writes json.dumps' text
// (ensure_ascii=False); indent < 0 means None (one line, ", " and ": " separators).
Value from_json(const nlohmann::ordered_json& j);
std::string to_json(const Value& v, int indent, bool sort_keys, const std::string& item_sep,
                    const std::string& key_sep);

}  // namespace lt::text::jinja
