// config.json's quantization_config for bitsandbytes 4-bit models: what QLoRA saves is accepted,
// every other setting is refused with one line naming the field.
#include <gtest/gtest.h>

#include "error_of.h"
#include "quant/bnb_config.h"

using namespace lt;
using lt::test::error_of;
using nlohmann::json;

namespace {

// transformers' BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
// bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch.bfloat16).to_dict()
json qlora() {
  return json::parse(R"({
    "_load_in_4bit": true, "_load_in_8bit": false, "bnb_4bit_compute_dtype": "bfloat16",
    "bnb_4bit_quant_storage": "uint8", "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": true,
    "llm_int8_enable_fp32_cpu_offload": false, "llm_int8_has_fp16_weight": false,
    "llm_int8_skip_modules": null, "llm_int8_threshold": 6.0, "load_in_4bit": true, "load_in_8bit": false,
    "quant_method": "bitsandbytes"})");
}

std::string refusal(const char* key, const json& value) {
  json qc = qlora();
  qc[key] = value;
  return error_of([&] { parse_bnb_quant_config(qc, "config.json"); });
}

}  // namespace

TEST(QuantBnbConfig, AcceptsQloraSettings) {
  const BnbQuantConfig c = parse_bnb_quant_config(qlora(), "config.json");
  EXPECT_EQ(c.compute_dtype, DType::BF16);
  EXPECT_TRUE(c.skip_modules.empty());
  json qc = qlora();
  qc["llm_int8_skip_modules"] = json::array({"lm_head"});
  qc["bnb_4bit_compute_dtype"] = "float16";
  const BnbQuantConfig d = parse_bnb_quant_config(qc, "config.json");
  EXPECT_EQ(d.compute_dtype, DType::F16);
  EXPECT_EQ(d.skip_modules, std::vector<std::string>{"lm_head"});
}

TEST(QuantBnbConfig, RefusesWhatItCannotLoad) {
  EXPECT_NE(refusal("quant_method", "gptq").find("quantization_config.quant_method: 'gptq' is not supported"),
            std::string::npos);
  EXPECT_NE(refusal("load_in_8bit", true).find("LLM.int8"), std::string::npos);
  EXPECT_NE(refusal("bnb_4bit_quant_type", "fp4").find("'fp4' is not supported"), std::string::npos);
  EXPECT_NE(refusal("bnb_4bit_use_double_quant", false).find("double-quantised"), std::string::npos);
  EXPECT_NE(refusal("bnb_4bit_quant_storage", "bfloat16").find("uint8 storage"), std::string::npos);
  EXPECT_NE(refusal("bnb_4bit_compute_dtype", "float64").find("not bfloat16, float16 or float32"), std::string::npos);
  EXPECT_NE(refusal("bnb_4bit_use_double_quant", "yes").find("not true or false"), std::string::npos);
  EXPECT_NE(refusal("llm_int8_skip_modules", json::array({1})).find("holds 1"), std::string::npos);
  json qc = qlora();
  qc["load_in_4bit"] = false;
  qc["_load_in_4bit"] = false;
  EXPECT_NE(error_of([&] { parse_bnb_quant_config(qc, "config.json"); }).find("load_in_4bit: is not true"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_bnb_quant_config(json::array(), "config.json"); }).find("not an object"),
            std::string::npos);
}
