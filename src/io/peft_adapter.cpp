#include "io/peft_adapter.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "io/input_file.h"
#include "leantrain/error.h"

namespace lt::io {

std::string peft_adapter_config_json(const PeftAdapterConfig& c) {
  nlohmann::json j;
  j["peft_type"] = "LORA";
  j["r"] = c.r;
  // An integer when it is one, as LoraConfig types it (lora_alpha: int).
  if (c.lora_alpha == std::floor(c.lora_alpha) && std::abs(c.lora_alpha) < 1e15) j["lora_alpha"] = int64_t(c.lora_alpha);
  else j["lora_alpha"] = c.lora_alpha;
  j["lora_dropout"] = c.lora_dropout;
  if (c.target_regex) j["target_modules"] = *c.target_regex;
  else j["target_modules"] = c.target_modules;
  j["bias"] = "none";
  j["fan_in_fan_out"] = c.fan_in_fan_out;
  j["task_type"] = c.task_type.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.task_type);
  j["base_model_name_or_path"] = c.base_model_name_or_path;
  j["inference_mode"] = true;
  j["init_lora_weights"] = true;
  j["modules_to_save"] = c.modules_to_save.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.modules_to_save);
  j["target_parameters"] = c.target_parameters.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.target_parameters);
  j["use_rslora"] = false;
  j["use_dora"] = false;
  j["revision"] = nullptr;
  j["layers_to_transform"] = nullptr;
  j["layers_pattern"] = nullptr;
  j["rank_pattern"] = nlohmann::json::object();
  j["alpha_pattern"] = nlohmann::json::object();
  return j.dump(2) + "\n";
}

namespace {

[[noreturn]] void bad(const std::string& file, const std::string& why, const std::string& fix) {
  fail("adapter config " + file, why, fix);
}

}  // namespace

PeftAdapterConfig read_peft_adapter_config(const std::string& dir) {
  const std::string file = (std::filesystem::path(dir) / kAdapterConfigFile).string();
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    fail("adapter " + dir, "no such directory", "pass a directory holding adapter_config.json and adapter_model.safetensors");
  check_input_file_if_exists(file, kMaxConfigBytes, "as an adapter config", "pass a PEFT adapter directory");
  std::ifstream f(file);
  if (!f) bad(file, "no such file", "pass a PEFT adapter directory (PeftModel.save_pretrained or leantrain --save with --lora-rank)");
  std::stringstream ss;
  ss << f.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(ss.str());
  } catch (const std::exception& e) {
    bad(file, std::string("it is not valid JSON: ") + e.what(), "write it again");
  }
  const std::string fix = "pass an adapter saved by PEFT's LoraConfig or by leantrain";
  if (!j.is_object()) bad(file, "it is not a JSON object", fix);
  const std::string type = j.value("peft_type", nlohmann::json(nullptr)).is_string() ? j["peft_type"].get<std::string>() : "";
  if (type != "LORA") bad(file, "peft_type is " + (type.empty() ? std::string("missing") : "\"" + type + "\"") + ", not \"LORA\"", fix);
  PeftAdapterConfig c;
  auto number = [&](const char* key, double dflt) {
    if (!j.contains(key) || j[key].is_null()) return dflt;
    if (!j[key].is_number()) bad(file, std::string("\"") + key + "\" is not a number", fix);
    return j[key].get<double>();
  };
  if (!j.contains("r") || !j["r"].is_number_integer() || j["r"].get<int64_t>() <= 0)
    bad(file, "\"r\" is missing or not a positive integer", fix);
  c.r = j["r"].get<int64_t>();
  c.lora_alpha = number("lora_alpha", 8);
  c.lora_dropout = number("lora_dropout", 0);
  if (!(c.lora_alpha > 0)) bad(file, "\"lora_alpha\" must be positive", fix);
  const nlohmann::json& t = j.contains("target_modules") ? j["target_modules"] : nlohmann::json(nullptr);
  if (t.is_string()) {
    c.target_regex = t.get<std::string>();
  } else if (t.is_array() && !t.empty()) {
    for (const auto& e : t) {
      if (!e.is_string()) bad(file, "\"target_modules\" holds a non-string", fix);
      c.target_modules.push_back(e.get<std::string>());
    }
  }
  if (j.contains("target_parameters") && j["target_parameters"].is_array())
    for (const auto& e : j["target_parameters"]) {
      if (!e.is_string()) bad(file, "\"target_parameters\" holds a non-string", fix);
      c.target_parameters.push_back(e.get<std::string>());
    }
  if (!c.target_regex && c.target_modules.empty() && c.target_parameters.empty())
    bad(file, "\"target_modules\" is missing or empty", "name the adapted modules in it");
  if (j.contains("modules_to_save") && j["modules_to_save"].is_array())
    for (const auto& e : j["modules_to_save"])
      if (e.is_string()) c.modules_to_save.push_back(e.get<std::string>());
  c.fan_in_fan_out = j.value("fan_in_fan_out", false);
  if (j.contains("task_type") && j["task_type"].is_string()) c.task_type = j["task_type"].get<std::string>();
  if (j.contains("base_model_name_or_path") && j["base_model_name_or_path"].is_string())
    c.base_model_name_or_path = j["base_model_name_or_path"].get<std::string>();
  // LoRA variants this implementation does not compute: refused rather than loaded wrongly.
  auto on = [&](const char* key) { return j.contains(key) && j[key].is_boolean() && j[key].get<bool>(); };
  auto non_empty = [&](const char* key) { return j.contains(key) && j[key].is_object() && !j[key].empty(); };
  for (const char* key : {"use_dora", "use_rslora"})
    if (on(key)) bad(file, std::string("\"") + key + "\" is true", "leantrain implements plain LoRA only; train the adapter without it");
  for (const char* key : {"rank_pattern", "alpha_pattern"})
    if (non_empty(key)) bad(file, std::string("\"") + key + "\" is not empty", "leantrain uses one rank and alpha for every layer");
  if (j.contains("bias") && j["bias"].is_string() && j["bias"] != "none")
    bad(file, "\"bias\" is " + j["bias"].dump() + ", not \"none\"", "leantrain adapters train no biases");
  return c;
}

namespace {

bool suffix_match(const std::string& path, const std::string& t) {
  return path == t || (path.size() > t.size() && path.compare(path.size() - t.size(), t.size(), t) == 0 &&
                       path[path.size() - t.size() - 1] == '.');
}

}  // namespace

bool peft_targets_parameter(const PeftAdapterConfig& c, const std::string& path) {
  for (const std::string& t : c.target_parameters)
    if (suffix_match(path, t)) return true;
  return false;
}

bool peft_targets(const PeftAdapterConfig& c, const std::string& path) {
  if (c.target_regex) {
    try {
      return std::regex_match(path, std::regex(*c.target_regex));
    } catch (const std::regex_error& e) {
      fail("adapter target_modules '" + *c.target_regex + "'", std::string("not a valid regex: ") + e.what(),
           "fix adapter_config.json");
    }
  }
  for (const std::string& t : c.target_modules)
    if (path == t || (path.size() > t.size() && path.compare(path.size() - t.size(), t.size(), t) == 0 &&
                      path[path.size() - t.size() - 1] == '.'))
      return true;
  return false;
}

}  // namespace lt::io
