// Typed reads of config.json fields with one-line errors naming the key.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "leantrain/error.h"

namespace lt::models::detail {

inline nlohmann::json parse_config(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  LT_CHECK(!j.is_discarded(), "config.json is not valid JSON", "the parser rejected it", "fix the file");
  LT_CHECK(j.is_object(), "config.json must be a JSON object", "found " + std::string(j.type_name()),
           "write {\"key\": value, ...}");
  return j;
}

inline void read_int(const nlohmann::json& j, const char* key, int64_t& out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return;
  LT_CHECK(it->is_number_integer(), std::string("config.json: '") + key + "' must be an integer",
           "found " + it->dump(), "write a whole number");
  LT_CHECK(!it->is_number_unsigned() || it->get<uint64_t>() <= uint64_t(INT64_MAX),
           std::string("config.json: '") + key + "' = " + it->dump(), "it does not fit in a 64-bit signed integer",
           "fix the config");
  out = it->get<int64_t>();
}

inline void read_bool(const nlohmann::json& j, const char* key, bool& out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return;
  LT_CHECK(it->is_boolean(), std::string("config.json: '") + key + "' must be true or false", "found " + it->dump(),
           "write true or false");
  out = it->get<bool>();
}

inline void read_double(const nlohmann::json& j, const char* key, double& out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return;
  LT_CHECK(it->is_number(), std::string("config.json: '") + key + "' must be a number", "found " + it->dump(),
           "write a number");
  out = it->get<double>();
}

inline void read_string(const nlohmann::json& j, const char* key, std::string& out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return;
  LT_CHECK(it->is_string(), std::string("config.json: '") + key + "' must be a string", "found " + it->dump(),
           "quote the value");
  out = it->get<std::string>();
}

// A family's parser reads only its own configs: "model_type", when present, must be `type`.
inline void check_model_type(const nlohmann::json& j, const char* type) {
  std::string found = type;
  read_string(j, "model_type", found);
  LT_CHECK(found == type, "config.json: model_type '" + found + "'", std::string("this parser reads ") + type + " configs",
           "build it through the model registry (models::config_from_json)");
}

inline void check_positive(const char* model, const char* key, int64_t v) {
  LT_CHECK(v > 0, std::string(model) + " config: " + key + " = " + std::to_string(v), "it must be positive",
           "fix the config");
}

// bos_token_id and eos_token_id, when given: an id, or a list of ids (transformers allows several
// EOS ids), each one the embedding has a row for. Generation stops at EOS; an id past the
// vocabulary could never be sampled.
inline void check_special_ids(const nlohmann::json& j, int64_t vocab_size) {
  for (const char* key : {"bos_token_id", "eos_token_id"}) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    const nlohmann::json ids = it->is_array() ? *it : nlohmann::json::array({*it});
    for (const nlohmann::json& id : ids) {
      LT_CHECK(id.is_number_integer(), std::string("config.json: '") + key + "' = " + it->dump(),
               "a token id is a whole number (or a list of them)", "fix the config");
      const bool inside = id.is_number_unsigned() ? id.get<uint64_t>() < uint64_t(vocab_size)
                                                  : id.get<int64_t>() >= 0 && id.get<int64_t>() < vocab_size;
      LT_CHECK(inside, std::string("config.json: '") + key + "' = " + id.dump(),
               "it is outside the vocabulary (vocab_size " + std::to_string(vocab_size) + ": ids 0 to " +
                   std::to_string(vocab_size - 1) + ")",
               "fix the id, or vocab_size");
    }
  }
}

// The embedding's padding index from pad_token_id (`fallback` when the key is absent: the
// config class's default), as torch's nn.Embedding resolves it: a negative id counts from the
// end; null means none (-1). An id outside [-vocab_size, vocab_size) is refused, as torch does.
inline int64_t padding_index(const nlohmann::json& j, int64_t vocab_size, int64_t fallback) {
  auto it = j.find("pad_token_id");
  if (it == j.end()) return fallback;
  if (it->is_null()) return -1;
  LT_CHECK(it->is_number_integer(), "config.json: 'pad_token_id' = " + it->dump(), "a token id is a whole number",
           "fix the config");
  const bool inside = it->is_number_unsigned() ? it->get<uint64_t>() < uint64_t(vocab_size)
                                               : it->get<int64_t>() >= -vocab_size && it->get<int64_t>() < vocab_size;
  LT_CHECK(inside, "config.json: 'pad_token_id' = " + it->dump(),
           "the embedding has no such row (vocab_size " + std::to_string(vocab_size) + ")",
           "fix the id, or vocab_size (or set it to null)");
  const int64_t id = it->get<int64_t>();
  return id < 0 ? vocab_size + id : id;
}

// layer_types: one string per layer, each one of `yes` (true) or `no` (false). `kinds` says what
// the family's layers are, `example` a valid list, both for the one-line error.
inline std::vector<bool> read_layer_kinds(const nlohmann::json& t, std::initializer_list<const char*> yes,
                                          std::initializer_list<const char*> no, const std::string& kinds,
                                          const std::string& example) {
  LT_CHECK(t.is_array(), "config.json: 'layer_types' must be a list", "found " + t.dump(), "write e.g. " + example);
  auto in = [](const nlohmann::json& e, std::initializer_list<const char*> names) {
    for (const char* n : names)
      if (e == n) return true;
    return false;
  };
  std::vector<bool> out;
  for (const auto& e : t) {
    LT_CHECK(e.is_string() && (in(e, yes) || in(e, no)), "config.json: layer_types entry " + e.dump(), kinds,
             "fix layer_types");
    out.push_back(in(e, yes));
  }
  return out;
}

}  // namespace lt::models::detail
