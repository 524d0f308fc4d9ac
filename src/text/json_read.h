// Reading the parts of a tokenizer.json: typed field access whose every error is one lt::Error
// naming the file and the field ("tokenizer F: pre_tokenizer.pretokenizers[1].pattern: ...").
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace lt::text {

using Json = nlohmann::json;

// Where the docs list what leantrain reads: the fix of every "not supported" error.
inline constexpr const char* kTokenizerDocs = "docs/user-guide.md, section Tokenizers, lists the layouts leantrain reads";

class JsonReader {
 public:
  explicit JsonReader(std::string file) : file_(std::move(file)) {}
  const std::string& file() const { return file_; }

  [[noreturn]] void fail(const std::string& where, const std::string& why, const std::string& fix = "") const;
  // "<where>: type 'T' is not supported (leantrain reads: <supported>; ...)".
  [[noreturn]] void unsupported(const std::string& where, const std::string& type, const std::string& supported) const;

  // obj[key] (obj must be an object), or nullptr when the key is missing or null.
  const Json* optional(const Json& obj, const std::string& where, const char* key) const;
  const Json& required(const Json& obj, const std::string& where, const char* key) const;

  std::string string(const Json& v, const std::string& where) const;
  bool boolean(const Json& v, const std::string& where) const;
  int64_t integer(const Json& v, const std::string& where, int64_t lo, int64_t hi) const;
  const Json& object(const Json& v, const std::string& where) const;
  const Json& array(const Json& v, const std::string& where) const;
  // One Unicode character, as tokenizers' `char` fields (Metaspace's replacement, Strip's content).
  std::string one_char(const Json& v, const std::string& where) const;

  bool bool_or(const Json& obj, const std::string& where, const char* key, bool dflt) const;
  // obj["type"], the component's kind.
  std::string type(const Json& obj, const std::string& where) const;

 private:
  std::string file_;
};

// "where.key" / "where[i]": the path of a field, for messages.
inline std::string field(const std::string& where, const char* key) { return where.empty() ? key : where + "." + key; }
inline std::string item(const std::string& where, size_t i) { return where + "[" + std::to_string(i) + "]"; }

}  // namespace lt::text
