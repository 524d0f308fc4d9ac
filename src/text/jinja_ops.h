// Python's semantics for what templates do to values: attribute and item access (jinja2's
// sandboxed getattr, including str and dict methods as bound callables), slicing, arithmetic,
// comparisons, `in`, iteration and len(). Errors are RenderError with Python's wording.
#pragma once
#include <string>
#include <vector>

#include "text/jinja_value.h"

namespace lt::text::jinja {

// Code points of valid UTF-8 and back (Python's str indexes by code point).
std::u32string to_u32(const std::string& s);
std::string from_u32(const std::u32string& s);

Value get_attr(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step]; null pointers are the missing parts.
Value get_slice(const Value& obj, const Value* start, const Value* stop, const Value* step);

// + - * / // % ** ~ on two values.
Value binary_op(const std::string& op, const Value& a, const Value& b);
// < > <= >= (== and != are equal()).
bool less_than(const Value& a, const Value& b);
bool contains(const Value& container, const Value& item);

// The items a for loop walks: a list's items, a dict's keys, a string's characters; Undefined
// walks nothing. Anything else is a TypeError.
std::vector<Value> iterate(const Value& v);
int64_t length(const Value& v);

// Python's str.strip/lstrip/rstrip (chars null: whitespace) and str.split (sep null: runs of
// whitespace), str.replace.
std::string py_strip(const std::string& s, const Value* chars, bool left, bool right);
std::vector<std::string> py_split(const std::string& s, const Value* sep, int64_t maxsplit);
std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count);
// ASCII-only upper/lower/title/capitalize; other text is a RenderError, not a silent difference.
std::string py_case(const std::string& s, const std::string& how);

// "undefined": the error jinja2's Undefined raises when it is used (a missing variable or key).
[[noreturn]] void undefined_error(const Value& v);

}  // namespace lt::text::jinja
