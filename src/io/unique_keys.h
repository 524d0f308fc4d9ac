// Duplicate keys in JSON objects. nlohmann::json keeps the last of two equal keys without a word;
// leantrain's readers of safetensors headers and .jsonl lines refuse them instead, since which
// value was meant is a guess. Pass callback() to nlohmann::json::parse, then ask duplicate().
#pragma once
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace lt::io {

class UniqueKeys {
 public:
  UniqueKeys() : seen_(std::make_shared<State>()) {}
  nlohmann::json::parser_callback_t callback() const;
  // The first key given twice in one object ("" when none).
  const std::string& duplicate() const { return seen_->duplicate; }

 private:
  struct State {
    std::vector<std::set<std::string>> open;  // the keys of each object being parsed, innermost last
    std::string duplicate;
  };
  std::shared_ptr<State> seen_;
};

}  // namespace lt::io
