#include "text/json_read.h"

#include "leantrain/error.h"
#include "text/utf8.h"

namespace lt::text {

void JsonReader::fail(const std::string& where, const std::string& why, const std::string& fix) const {
  lt::fail("tokenizer " + file_, (where.empty() ? "" : where + ": ") + why,
           fix.empty() ? "check the file; it should be a Hugging Face tokenizer.json" : fix);
}

void JsonReader::unsupported(const std::string& where, const std::string& type, const std::string& supported) const {
  fail(where, "type '" + type + "' is not supported (leantrain reads " + supported + ")", kTokenizerDocs);
}

const Json* JsonReader::optional(const Json& obj, const std::string& where, const char* key) const {
  object(obj, where);
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

const Json& JsonReader::required(const Json& obj, const std::string& where, const char* key) const {
  const Json* v = optional(obj, where, key);
  if (!v) fail(field(where, key), "is missing");
  return *v;
}

std::string JsonReader::string(const Json& v, const std::string& where) const {
  if (!v.is_string()) fail(where, std::string("expected a string, found ") + v.type_name());
  return v.get<std::string>();
}

bool JsonReader::boolean(const Json& v, const std::string& where) const {
  if (!v.is_boolean()) fail(where, std::string("expected true or false, found ") + v.type_name());
  return v.get<bool>();
}

int64_t JsonReader::integer(const Json& v, const std::string& where, int64_t lo, int64_t hi) const {
  if (!v.is_number_integer()) fail(where, std::string("expected an integer, found ") + v.type_name());
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(hi))
    fail(where, std::to_string(v.get<uint64_t>()) + " is out of range " + std::to_string(lo) + ".." + std::to_string(hi));
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi)
    fail(where, std::to_string(x) + " is out of range " + std::to_string(lo) + ".." + std::to_string(hi));
  return x;
}

const Json& JsonReader::object(const Json& v, const std::string& where) const {
  if (!v.is_object()) fail(where, std::string("expected an object, found ") + v.type_name());
  return v;
}

const Json& JsonReader::array(const Json& v, const std::string& where) const {
  if (!v.is_array()) fail(where, std::string("expected an array, found ") + v.type_name());
  return v;
}

std::string JsonReader::one_char(const Json& v, const std::string& where) const {
  std::string s = string(v, where);
  if (s.empty() || utf8_count(s) != 1) fail(where, "expected one character, found '" + s + "'");
  return s;
}

bool JsonReader::bool_or(const Json& obj, const std::string& where, const char* key, bool dflt) const {
  const Json* v = optional(obj, where, key);
  return v ? boolean(*v, field(where, key)) : dflt;
}

std::string JsonReader::type(const Json& obj, const std::string& where) const {
  return string(required(obj, where, "type"), field(where, "type"));
}

}  // namespace lt::text
