// LlamaConfig from config.json (models/llama.h): every field read, each type's transformers
// defaults, the refusals (one line each), and to_json's round trip.
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>

#include "leantrain/error.h"
#include "models/llama.h"
#include "models/registry.h"
#include "unit/error_of.h"

using namespace lt;
using models::LlamaConfig;

namespace {

LlamaConfig parse(const std::string& text) { return LlamaConfig::from_json(nlohmann::json::parse(text)); }

using lt::test::error_of;

// The config's error through the registry (what `--config` runs): one line containing `fragment`.
void expect_refused(const std::string& text, const std::string& fragment) {
  const std::string m = error_of([&] { models::config_from_json(text); });
  EXPECT_NE(m.find(fragment), std::string::npos) << text << "\n -> " << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

// bos_token_id / eos_token_id (an id or a list) must name rows of the embedding (issue 47).
TEST(LlamaConfig, SpecialTokenIdsLieInTheVocabulary) {
  const std::string head = R"({"model_type": "llama", "vocab_size": 300, "hidden_size": 48, "intermediate_size": 100,
    "num_hidden_layers": 1, "num_attention_heads": 6, )";
  expect_refused(head + R"("bos_token_id": 128000})", "config.json: 'bos_token_id' = 128000: it is outside the vocabulary "
                                                      "(vocab_size 300: ids 0 to 299)");
  expect_refused(head + R"("eos_token_id": [2, 300]})", "'eos_token_id' = 300: it is outside the vocabulary");
  expect_refused(head + R"("eos_token_id": -1})", "'eos_token_id' = -1: it is outside the vocabulary");
  expect_refused(head + R"("bos_token_id": "1"})", "'bos_token_id' = \"1\": a token id is a whole number");
  EXPECT_NO_THROW(parse(head + R"("bos_token_id": 0, "eos_token_id": [1, 299], "pad_token_id": -1})"));
  // pad_token_id is embed_tokens' padding_idx, resolved as torch's nn.Embedding resolves it.
  EXPECT_EQ(parse(head + R"("pad_token_id": -1})").padding_idx(), 299);
  EXPECT_EQ(parse(head + R"("pad_token_id": 7})").padding_idx(), 7);
  EXPECT_EQ(parse(head + R"("pad_token_id": null})").padding_idx(), -1);
  EXPECT_EQ(parse(head + "\"rms_norm_eps\": 1e-6}").padding_idx(), -1);  // LlamaConfig's default: None
  expect_refused(head + R"("pad_token_id": 300})", "'pad_token_id' = 300: the embedding has no such row");
  expect_refused(head + R"("pad_token_id": -301})", "'pad_token_id' = -301: the embedding has no such row");
  expect_refused(head + R"("pad_token_id": 1.5})", "'pad_token_id' = 1.5: a token id is a whole number");
}

TEST(LlamaConfig, ReadsEveryField) {
  LlamaConfig c = parse(R"({
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 300, "hidden_size": 48,
    "intermediate_size": 100, "num_hidden_layers": 3, "num_attention_heads": 6, "num_key_value_heads": 2,
    "head_dim": 16, "max_position_embeddings": 512, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 256},
    "attention_bias": true, "mlp_bias": true, "tie_word_embeddings": true, "hidden_act": "silu",
    "initializer_range": 0.03, "attention_dropout": 0.0, "pretraining_tp": 1, "use_cache": true,
    "bos_token_id": 256, "eos_token_id": [257, 299], "pad_token_id": null, "torch_dtype": "bfloat16"})");
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.vocab_size, 300);
  EXPECT_EQ(c.hidden_size, 48);
  EXPECT_EQ(c.intermediate_size, 100);
  EXPECT_EQ(c.num_hidden_layers, 3);
  EXPECT_EQ(c.num_attention_heads, 6);
  EXPECT_EQ(c.kv_heads(), 2);
  EXPECT_EQ(c.head_size(), 16);  // given: 6 heads of 16 = 96, not the hidden size 48
  EXPECT_EQ(c.max_position_embeddings, 512);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 256);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_TRUE(c.mlp_bias);
  EXPECT_TRUE(c.qkv_bias() && c.o_bias() && c.gated_bias());
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(c.initializer_range, 0.03);
  EXPECT_EQ(c.kept["bos_token_id"], 256);
  EXPECT_EQ(c.kept["eos_token_id"], nlohmann::json({257, 299}));
  EXPECT_TRUE(c.kept["pad_token_id"].is_null());
  EXPECT_EQ(c.kept["torch_dtype"], "bfloat16");

  // Written back: everything transformers reads, the kept keys untouched, and read again equal.
  const nlohmann::json j = nlohmann::json::parse(c.to_json());
  EXPECT_EQ(j["architectures"], nlohmann::json({"LlamaForCausalLM"}));
  EXPECT_EQ(j["num_key_value_heads"], 2);
  EXPECT_EQ(j["head_dim"], 16);
  EXPECT_EQ(j["rope_scaling"]["rope_type"], "llama3");
  EXPECT_EQ(j["rope_scaling"]["original_max_position_embeddings"], 256);
  EXPECT_EQ(j["eos_token_id"], nlohmann::json({257, 299}));
  EXPECT_EQ(j["attention_bias"], true);
  EXPECT_EQ(parse(c.to_json()).to_json(), c.to_json());
}

TEST(LlamaConfig, DefaultsAreTransformersPerType) {
  LlamaConfig l = parse(R"({"model_type": "llama"})");  // transformers' LlamaConfig()
  EXPECT_EQ(l.vocab_size, 32000);
  EXPECT_EQ(l.hidden_size, 4096);
  EXPECT_EQ(l.intermediate_size, 11008);
  EXPECT_EQ(l.num_hidden_layers, 32);
  EXPECT_EQ(l.num_attention_heads, 32);
  EXPECT_EQ(l.kv_heads(), 32);  // None: one per head
  EXPECT_EQ(l.head_size(), 128);
  EXPECT_EQ(l.max_position_embeddings, 2048);
  EXPECT_DOUBLE_EQ(l.rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(l.rope_theta, 10000.0);
  EXPECT_TRUE(l.rope_scaling.type.empty());
  EXPECT_FALSE(l.tie_word_embeddings);
  EXPECT_FALSE(l.qkv_bias() || l.o_bias() || l.gated_bias());

  LlamaConfig q = parse(R"({"model_type": "qwen2", "attention_bias": false, "mlp_bias": true})");  // Qwen2Config()
  EXPECT_EQ(q.vocab_size, 151936);
  EXPECT_EQ(q.intermediate_size, 22016);
  EXPECT_EQ(q.kv_heads(), 32);
  EXPECT_EQ(q.max_position_embeddings, 32768);
  EXPECT_TRUE(q.qkv_bias());  // Qwen2: q, k, v always with bias, o_proj and the MLP never
  EXPECT_FALSE(q.o_bias() || q.gated_bias());
  EXPECT_EQ(nlohmann::json::parse(q.to_json())["architectures"], nlohmann::json({"Qwen2ForCausalLM"}));
  EXPECT_EQ(nlohmann::json::parse(q.to_json())["use_sliding_window"], false);

  LlamaConfig m = parse(R"({"model_type": "mistral", "sliding_window": null})");  // MistralConfig()
  EXPECT_EQ(m.intermediate_size, 14336);
  EXPECT_EQ(m.kv_heads(), 8);
  EXPECT_EQ(m.max_position_embeddings, 131072);
  EXPECT_FALSE(m.qkv_bias() || m.o_bias() || m.gated_bias());
  EXPECT_TRUE(nlohmann::json::parse(m.to_json())["sliding_window"].is_null());
  EXPECT_EQ(&models::config_from_json(m.to_json())->family(), &models::family_of_type("mistral"));
}

// Qwen/Qwen3-0.6B's config.json as published (transformers 4.51).
TEST(LlamaConfig, Qwen3ReadsTheRealConfigAndDefaults) {
  LlamaConfig c = parse(R"({"architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 1024,
    "initializer_range": 0.02, "intermediate_size": 3072, "max_position_embeddings": 40960, "max_window_layers": 28,
    "model_type": "qwen3", "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
    "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": true,
    "use_sliding_window": false, "vocab_size": 151936})");
  EXPECT_EQ(c.model_type, "qwen3");
  EXPECT_EQ(c.head_size(), 128);  // 16 heads of 128 over a width of 1024
  EXPECT_TRUE(c.qk_norm());
  EXPECT_FALSE(c.qkv_bias() || c.o_bias() || c.gated_bias());
  EXPECT_EQ(c.num_parameters(), 596'049'920.0);
  const LlamaConfig p = LlamaConfig::preset("qwen3-0.6b");
  EXPECT_EQ(p.to_json(), c.to_json());  // the preset is this file
  const nlohmann::json j = nlohmann::json::parse(c.to_json());
  EXPECT_EQ(j["architectures"], nlohmann::json({"Qwen3ForCausalLM"}));
  EXPECT_EQ(j["use_sliding_window"], false);
  EXPECT_TRUE(j["sliding_window"].is_null());
  EXPECT_EQ(j["max_window_layers"], 28);
  EXPECT_EQ(j["eos_token_id"], 151645);
  EXPECT_EQ(parse(c.to_json()).to_json(), c.to_json());
  EXPECT_EQ(&models::config_from_json(c.to_json())->family(), &models::family_of_type("qwen3"));
  // Qwen3Config(): head_dim 128 of its own, attention_bias on all four projections when set.
  LlamaConfig d = parse(R"({"model_type": "qwen3", "attention_bias": true, "max_window_layers": 3})");
  EXPECT_EQ(d.vocab_size, 151936);
  EXPECT_EQ(d.intermediate_size, 22016);
  EXPECT_EQ(d.kv_heads(), 32);
  EXPECT_EQ(d.head_size(), 128);
  EXPECT_EQ(d.max_position_embeddings, 32768);
  EXPECT_DOUBLE_EQ(d.rope_theta, 10000.0);
  EXPECT_FALSE(d.tie_word_embeddings);
  EXPECT_TRUE(d.qkv_bias() && d.o_bias() && !d.gated_bias());
  EXPECT_EQ(d.max_window_layers, 3);
  // A layer_types list naming sliding layers is full attention while use_sliding_window is false.
  EXPECT_EQ(parse(R"({"model_type": "qwen3", "num_hidden_layers": 1, "layer_types": ["sliding_attention"],
                      "sliding_window": 128})").window_of(0), 0);
  expect_refused(R"({"model_type": "qwen3", "num_hidden_layers": 2, "layer_types": ["sliding_attention"]})",
                 "layer_types has 1 entries for 2 layers");
  expect_refused(R"({"model_type": "qwen3", "layer_types": "sliding"})", "'layer_types' must be a list");
  expect_refused(R"({"model_type": "qwen3", "max_window_layers": -1})", "max_window_layers = -1");
  expect_refused(R"({"model_type": "qwen3", "head_dim": 7})", "head dim 7");
  expect_refused(R"({"model_type": "qwen3", "hidden_act": "gelu"})", "hidden_act 'gelu'");
}

// Where each family's window applies, as transformers lays it out.
TEST(LlamaConfig, SlidingWindows) {
  LlamaConfig m = parse(R"({"model_type": "mistral", "num_hidden_layers": 3})");  // MistralConfig: 4096
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(m.window_of(i), 4096);
  EXPECT_EQ(nlohmann::json::parse(m.to_json())["sliding_window"], 4096);
  EXPECT_EQ(parse(R"({"model_type": "mistral", "sliding_window": null})").window_of(0), 0);
  // Qwen2 / Qwen3: only with use_sliding_window, on the layers from max_window_layers on ...
  LlamaConfig q = parse(R"({"model_type": "qwen2", "num_hidden_layers": 4, "use_sliding_window": true,
                           "sliding_window": 64, "max_window_layers": 2})");
  EXPECT_EQ(q.window_of(0), 0);
  EXPECT_EQ(q.window_of(1), 0);
  EXPECT_EQ(q.window_of(2), 64);
  EXPECT_EQ(q.window_of(3), 64);
  EXPECT_EQ(parse(q.to_json()).to_json(), q.to_json());
  EXPECT_EQ(parse(R"({"model_type": "qwen2", "sliding_window": 64, "max_window_layers": 0})").window_of(5), 0);
  // ... or those layer_types names.
  LlamaConfig t = parse(R"({"model_type": "qwen3", "num_hidden_layers": 3, "use_sliding_window": true,
                           "sliding_window": 16, "layer_types": ["sliding_attention", "full_attention",
                           "sliding_attention"]})");
  EXPECT_EQ(t.window_of(0), 16);
  EXPECT_EQ(t.window_of(1), 0);
  EXPECT_EQ(t.window_of(2), 16);
  EXPECT_EQ(parse(t.to_json()).to_json(), t.to_json());
}

TEST(LlamaConfig, RopeScalingForms) {
  // The older "type" key, "default" (no scaling), transformers 5's rope_parameters with the theta.
  EXPECT_EQ(parse(R"({"model_type": "llama", "rope_scaling": {"type": "linear", "factor": 2.0}})").rope_scaling.type,
            "linear");
  EXPECT_TRUE(parse(R"({"model_type": "llama", "rope_scaling": {"rope_type": "default"}})").rope_scaling.type.empty());
  LlamaConfig p = parse(R"({"model_type": "llama", "rope_parameters": {"rope_type": "linear", "factor": 4.0,
                           "rope_theta": 1000.0}})");
  EXPECT_EQ(p.rope_scaling.type, "linear");
  EXPECT_DOUBLE_EQ(p.rope_scaling.factor, 4.0);
  EXPECT_DOUBLE_EQ(p.rope_theta, 1000.0);
  EXPECT_EQ(parse(p.to_json()).rope_scaling.factor, 4.0);
}

TEST(LlamaConfig, RefusalsAreOneLine) {
  expect_refused(R"({"model_type": "llama", "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})",
                 "rope_scaling type 'yarn' is not supported");
  expect_refused(R"({"model_type": "llama", "rope_scaling": {"type": "dynamic", "factor": 2.0}})", "'dynamic'");
  expect_refused(R"({"model_type": "llama", "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
                   "low_freq_factor": 1.0, "high_freq_factor": 4.0}})",
                 "has no 'original_max_position_embeddings'");
  expect_refused(R"({"model_type": "llama", "rope_scaling": {"rope_type": "linear"}})", "has no 'factor'");
  expect_refused(R"({"model_type": "llama", "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
                   "low_freq_factor": 4.0, "high_freq_factor": 1.0, "original_max_position_embeddings": 8192}})",
                 "low_freq_factor < high_freq_factor");
  expect_refused(R"({"model_type": "llama", "hidden_size": 100, "num_attention_heads": 3})",
                 "hidden_size 100 is not divisible by num_attention_heads 3");
  expect_refused(R"({"model_type": "llama", "num_attention_heads": 32, "num_key_value_heads": 5})",
                 "num_attention_heads 32 is not divisible by num_key_value_heads 5");
  expect_refused(R"({"model_type": "llama", "head_dim": 7})", "head dim 7");
  expect_refused(R"({"model_type": "llama", "head_dim": 1024})", "head dim 1024");
  expect_refused(R"({"model_type": "llama", "num_key_value_heads": -2})", "num_key_value_heads = -2");
  expect_refused(R"({"model_type": "llama", "hidden_act": "gelu"})", "hidden_act 'gelu' is not supported");
  expect_refused(R"({"model_type": "llama", "attention_dropout": 0.1})", "attention_dropout");
  expect_refused(R"({"model_type": "llama", "rms_norm_eps": 0})", "rms_norm_eps");
  expect_refused(R"({"model_type": "llama", "rope_theta": -1})", "rope_theta");
  expect_refused(R"({"model_type": "llama", "num_hidden_layers": 0})", "num_hidden_layers = 0");
  expect_refused(R"({"model_type": "llama", "hidden_size": 4611686018427387904, "num_attention_heads": 1,
                   "head_dim": 2})",
                 "parameters");
  expect_refused(R"({"model_type": "mistral", "sliding_window": 0})", "mistral 'sliding_window' is 0");
  expect_refused(R"({"model_type": "qwen2", "sliding_window": "4k"})", "qwen2 'sliding_window' is \"4k\"");
  // 0 key/value heads read as absent (one per head), as transformers' None.
  EXPECT_EQ(error_of([] { models::config_from_json(R"({"model_type": "llama", "num_key_value_heads": 0})"); }), "");
}

TEST(LlamaConfig, SizeFlags) {
  auto c = models::config_from_preset("llama-tiny");
  c->apply_overrides({.dim = 96, .depth = 3, .heads = 6, .mlp_dim = 200});
  c->validate();
  EXPECT_EQ(c->size_summary(), "dim 96, depth 3, heads 6 (2 kv), mlp 200");
  const nlohmann::json j = nlohmann::json::parse(c->to_json());
  EXPECT_EQ(j["hidden_size"], 96);
  EXPECT_EQ(j["num_hidden_layers"], 3);
  EXPECT_EQ(j["num_attention_heads"], 6);
  EXPECT_EQ(j["head_dim"], 16);
  EXPECT_EQ(j["intermediate_size"], 200);
  EXPECT_NE(error_of([&] { c->apply_overrides({.heads = 5}); }).find("not divisible by 5 heads"), std::string::npos);
  EXPECT_NE(error_of([&] { c->apply_overrides({.dim = 90, .heads = 3}); }).find("3 heads do not divide"),
            std::string::npos);
  EXPECT_NE(error_of([&] { c->apply_overrides({.patch = 4}); }).find("has no patches"), std::string::npos);
}

}  // namespace
