#include "text/json_read.h"

#include "leantrain/error.h"
#include "text/utf8.h"

namespace lt::text {

std::string printable(std::string_view s) {
  constexpr size_t kMax = 200;
  std::string out;
  for (size_t i = 0; i < s.size() && out.size() < kMax; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7F) {
      const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += char(c);
    }
  }
  if (out.size() >= kMax) out += "...";
  return out;
}

JsonReader::Nesting::Nesting(const JsonReader& r, const std::string& where) : r_(r) {
  if (++r_.depth_ > kMaxNesting) {
    --r_.depth_;
    r.fail(where, "Sequences are nested more than " + std::to_string(kMaxNesting) + " deep");
  }
}

void JsonReader::fail(const std::string& where, const std::string& why, const std::string& fix) const {
  lt::fail("tokenizer " + printable(file_), (where.empty() ? "" : printable(where) + ": ") + printable(why),
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
