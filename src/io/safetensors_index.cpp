// Parsing model.safetensors.index.json: the text only; the shards it names are opened by
// WeightFiles, which checks them against this map.
#include "io/safetensors_index.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>

#include "leantrain/error.h"

namespace lt::io {

namespace {

[[noreturn]] void bad_index(const std::string& path, const std::string& why) {
  fail("invalid safetensors index '" + path + "'", why,
       "re-export the checkpoint with transformers' save_pretrained, or pass a directory with one model.safetensors");
}

// "'name'" with control bytes and overlong names made printable: a message stays one line.
std::string quoted(const std::string& s) {
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < 120; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  return out + (s.size() > 120 ? "...'" : "'");
}

// Why `name` cannot be a shard of the index's directory, or "".
std::string shard_name_problem(const std::string& name) {
  if (name.empty()) return "is empty";
  if (name == "." || name == "..") return "is not a file name";
  if (name.front() == '/') return "is an absolute path, and shards must lie in the checkpoint directory";
  if (name.find('/') != std::string::npos) return "is a path, and shards must be files of the checkpoint directory itself";
  if (name.find('\0') != std::string::npos) return "holds a NUL byte";
  if (name.size() > 255) return "is longer than a file name can be (255 bytes)";
  return "";
}

}  // namespace

SafetensorsIndex parse_safetensors_index(const std::string& text, const std::string& path) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) bad_index(path, "it is not valid JSON");
  if (!j.is_object()) bad_index(path, std::string("it is JSON ") + j.type_name() + ", not an object");
  SafetensorsIndex idx;
  if (auto m = j.find("metadata"); m != j.end() && !m->is_null()) {
    if (!m->is_object()) bad_index(path, "\"metadata\" is not an object");
    if (auto t = m->find("total_size"); t != m->end() && !t->is_null()) {
      // transformers writes an integer; some exporters a float. Either is only informative.
      if (!t->is_number() || t->get<double>() < 0 || t->get<double>() > 9.2e18)
        bad_index(path, "\"metadata\".\"total_size\" is " + t->dump() + ", not a byte count");
      idx.total_size = t->is_number_integer() ? t->get<int64_t>() : int64_t(t->get<double>());
    }
  }
  auto wm = j.find("weight_map");
  if (wm == j.end()) bad_index(path, "it has no \"weight_map\"");
  if (!wm->is_object()) bad_index(path, "\"weight_map\" is not an object");
  if (wm->empty()) bad_index(path, "\"weight_map\" names no tensor");
  std::set<std::string> shards;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (it.key().empty()) bad_index(path, "\"weight_map\" has a tensor with an empty name");
    if (!it->is_string())
      bad_index(path, "the shard of tensor " + quoted(it.key()) + " is " + std::string(it->type_name()) + ", not a file name");
    const std::string shard = it->get<std::string>();
    if (std::string why = shard_name_problem(shard); !why.empty())
      bad_index(path, "the shard " + quoted(shard) + " of tensor " + quoted(it.key()) + " " + why);
    idx.weight_map[it.key()] = shard;
    shards.insert(shard);
  }
  idx.shards.assign(shards.begin(), shards.end());
  return idx;
}

}  // namespace lt::io
