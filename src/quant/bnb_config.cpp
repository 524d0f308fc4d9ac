#include "quant/bnb_config.h"

#include "leantrain/error.h"

namespace lt {

namespace {

struct Fields {
  const nlohmann::json& qc;
  std::string source;

  [[noreturn]] void refuse(const char* key, const std::string& why, const std::string& fix) const {
    fail(source + ": quantization_config." + key, why, fix);
  }
  // qc[key] or nullptr when absent or null
  const nlohmann::json* get(const char* key) const {
    const auto it = qc.find(key);
    return it == qc.end() || it->is_null() ? nullptr : &*it;
  }
  std::string text(const char* key, const std::string& dflt) const {
    const nlohmann::json* v = get(key);
    if (!v) return dflt;
    if (!v->is_string()) refuse(key, "is " + v->dump() + ", not a string", "write it as transformers does");
    return v->get<std::string>();
  }
  bool flag(const char* key, bool dflt) const {
    const nlohmann::json* v = get(key);
    if (!v) return dflt;
    if (!v->is_boolean()) refuse(key, "is " + v->dump() + ", not true or false", "write it as transformers does");
    return v->get<bool>();
  }
};

}  // namespace

BnbQuantConfig parse_bnb_quant_config(const nlohmann::json& qc, const std::string& source) {
  if (!qc.is_object()) fail(source + ": quantization_config", "is not an object", "write it as transformers does");
  const Fields f{qc, source};
  const std::string method = f.text("quant_method", "");
  if (method != "bitsandbytes")
    f.refuse("quant_method", "'" + method + "' is not supported (leantrain loads bitsandbytes 4-bit NF4 weights)",
             "load the unquantised model (leantrain can quantise it with NF4 itself)");
  if (f.flag("load_in_8bit", false) || f.flag("_load_in_8bit", false))
    f.refuse("load_in_8bit", "LLM.int8 8-bit weights are not supported (leantrain loads 4-bit NF4)",
             "load the unquantised model, or one saved with load_in_4bit");
  if (!f.flag("load_in_4bit", f.flag("_load_in_4bit", false)))
    f.refuse("load_in_4bit", "is not true", "load a model saved with load_in_4bit=True");
  const std::string type = f.text("bnb_4bit_quant_type", "fp4");
  if (type != "nf4")
    f.refuse("bnb_4bit_quant_type", "'" + type + "' is not supported (leantrain reads NF4)",
             "save the model with bnb_4bit_quant_type=\"nf4\"");
  if (!f.flag("bnb_4bit_use_double_quant", false))
    f.refuse("bnb_4bit_use_double_quant", "is false: leantrain reads NF4 with double-quantised absmax only",
             "save the model with bnb_4bit_use_double_quant=True (QLoRA's setting)");
  const std::string storage = f.text("bnb_4bit_quant_storage", "uint8");
  if (storage != "uint8")
    f.refuse("bnb_4bit_quant_storage", "'" + storage + "' is not supported (leantrain reads uint8 storage)",
             "save the model with the default bnb_4bit_quant_storage");
  BnbQuantConfig c;
  const std::string dt = f.text("bnb_4bit_compute_dtype", "float32");
  if (dt == "bfloat16") c.compute_dtype = DType::BF16;
  else if (dt == "float16") c.compute_dtype = DType::F16;
  else if (dt == "float32") c.compute_dtype = DType::F32;
  else f.refuse("bnb_4bit_compute_dtype", "'" + dt + "' is not bfloat16, float16 or float32", "pick one of those");
  if (const nlohmann::json* skip = f.get("llm_int8_skip_modules")) {
    if (!skip->is_array()) f.refuse("llm_int8_skip_modules", "is not a list", "write it as transformers does");
    for (const auto& m : *skip) {
      if (!m.is_string()) f.refuse("llm_int8_skip_modules", "holds " + m.dump(), "list module names as strings");
      c.skip_modules.push_back(m.get<std::string>());
    }
  }
  return c;
}

}  // namespace lt
