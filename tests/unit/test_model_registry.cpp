// The model registry (models/registry.h): config.json needs a known model_type, every family's
// config round-trips through to_json / config_from_json, the closed-form size equals what the
// built model holds, and configs too large for any machine are refused before anything is built.
// Last, a mutation loop over config.json texts: whatever the values, parsing, validating and
// sizing give an lt::Error or a model, never a crash.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>

#include "leantrain/error.h"
#include "models/registry.h"

using namespace lt;

namespace {

const nn::InitOptions kMeta{.device = Device::meta()};

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ModelRegistry, ConfigJsonNeedsAKnownModelType) {
  for (const char* text : {R"({"n_embd": 64, "n_layer": 2, "n_head": 2})", R"({"model_type": "t5"})",
                           R"({"model_type": 7})", R"({"model_type": null, "hidden_size": 32})"}) {
    const std::string m = message_of([&] { models::config_from_json(text); });
    EXPECT_NE(m.find("the known model types are gpt2, vit"), std::string::npos) << text << " -> " << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;  // one line
  }
  EXPECT_NE(message_of([] { models::config_from_json(R"({"model_type": "t5"})"); }).find("'t5'"), std::string::npos);
  EXPECT_NE(message_of([] { models::config_from_json(R"({"n_embd": 64})"); }).find("no \"model_type\""),
            std::string::npos);
  // The public factory goes through the registry too: no guessing the family from the keys.
  EXPECT_NE(message_of([] { models::create_model_from_json(R"({"n_embd": 64, "n_head": 2})", kMeta); }),
            "");
  // A family's own parser refuses another family's config.
  EXPECT_NE(message_of([] { models::GPT2Config::from_json(R"({"model_type": "vit"})"); }).find("model_type 'vit'"),
            std::string::npos);
}

TEST(ModelRegistry, FamiliesAndPresets) {
  EXPECT_EQ(models::family_of_type("gpt2").display_name(), "GPT-2");
  EXPECT_TRUE(models::family_of_type("gpt2").causal());
  EXPECT_EQ(models::family_of_type("gpt2").tokenizer(), "bytes");
  EXPECT_FALSE(models::family_of_type("vit").causal());
  EXPECT_EQ(models::family_of_type("vit").input(), models::InputKind::Images);
  EXPECT_NE(message_of([] { models::family_of_type("t5"); }).find("gpt2, vit, llama, qwen2, qwen3, mistral, resnet, bert, roberta, distilbert"), std::string::npos);
  EXPECT_EQ(models::family_of_preset("vit-l-16"), &models::family_of_type("vit"));
  EXPECT_EQ(models::family_of_preset("nope"), nullptr);
  EXPECT_NE(message_of([] { models::config_from_preset("gpt3"); }).find("unknown model 'gpt3'"), std::string::npos);
  for (const std::string& p : models::preset_names())
    EXPECT_EQ(&models::config_from_preset(p)->family(), models::family_of_preset(p)) << p;
}

TEST(ModelRegistry, SizeFlagsMapToEachFamilysFields) {
  auto g = models::config_from_preset("gpt2-tiny");
  g->apply_overrides({.dim = 64, .depth = 3, .heads = 8, .mlp_dim = 100});
  g->validate();
  EXPECT_EQ(g->size_summary(), "dim 64, depth 3, heads 8, mlp 100");
  const auto gj = nlohmann::json::parse(g->to_json());
  EXPECT_EQ(gj["n_embd"], 64);
  EXPECT_EQ(gj["n_layer"], 3);
  EXPECT_EQ(gj["n_head"], 8);
  EXPECT_EQ(gj["n_inner"], 100);
  EXPECT_NE(message_of([&] { g->apply_overrides({.patch = 4}); }).find("GPT-2 has no patches"), std::string::npos);

  auto v = models::config_from_preset("vit-tiny");
  v->apply_overrides({.dim = 48, .depth = 2, .heads = 3, .patch = 4, .mlp_dim = 96});
  v->validate();
  EXPECT_EQ(v->size_summary(), "patch 4, dim 48, depth 2, heads 3, mlp 96");
  v->fit_images(32, 3, 5);
  const models::ImageInput in = v->images();
  EXPECT_EQ(in.size, 32);
  EXPECT_EQ(in.channels, 3);
  EXPECT_EQ(in.patch, 4);
  EXPECT_EQ(in.classes, 5);
  EXPECT_EQ(v->build(kMeta)->parameter("encoder.pos_embedding").shape(), Shape({1, 65, 48}));
  EXPECT_NE(message_of([&] { (void)v->tokens(); }).find("reads no tokens"), std::string::npos);
  EXPECT_NE(message_of([&] { (void)g->images(); }).find("reads no images"), std::string::npos);
}

TEST(ModelRegistry, EveryFamilyRoundTripsItsConfig) {
  std::vector<std::string> texts;
  for (const std::string& p : models::preset_names()) texts.push_back(models::config_from_preset(p)->to_json());
  // Non-default values of every kind: null-able n_inner, an untied head, the erf GELU, labels.
  models::GPT2Config g = models::GPT2Config::preset("gpt2-tiny");
  g.n_inner = 200;
  g.tie_word_embeddings = false;
  g.activation_function = "gelu";
  g.layer_norm_epsilon = 3e-7;
  g.resid_pdrop = 0.25;
  texts.push_back(g.to_json());
  models::ViTConfig v = models::ViTConfig::preset("vit-tiny");
  v.num_labels = 3;
  v.dropout = 0.125;
  v.layer_norm_eps = 1e-12;
  texts.push_back(v.to_json());
  for (const std::string& text : texts) {
    auto c = models::config_from_json(text);
    EXPECT_EQ(c->to_json(), text);
    EXPECT_EQ(models::config_from_json(c->to_json())->to_json(), text);
  }
  models::GPT2Config back = models::GPT2Config::from_json(g.to_json());
  EXPECT_EQ(back.n_inner, 200);
  EXPECT_FALSE(back.tie_word_embeddings);
  EXPECT_EQ(back.gelu_approx(), GeluApprox::Erf);
}

TEST(ModelRegistry, ClosedFormSizeIsWhatTheModelHolds) {
  std::vector<std::unique_ptr<models::ModelConfig>> cfgs;
  for (const std::string& p : models::preset_names()) cfgs.push_back(models::config_from_preset(p));
  cfgs.push_back(models::config_from_json(
      R"({"model_type": "gpt2", "vocab_size": 300, "n_positions": 40, "n_embd": 24, "n_layer": 3, "n_head": 3,
          "n_inner": 50, "tie_word_embeddings": false})"));
  cfgs.push_back(models::config_from_json(
      R"({"model_type": "vit", "image_size": 30, "patch_size": 5, "num_channels": 2, "hidden_size": 12,
          "num_hidden_layers": 3, "num_attention_heads": 3, "intermediate_size": 20, "num_labels": 7})"));
  for (auto& c : cfgs) {
    auto m = c->build(kMeta);
    EXPECT_EQ(c->size().parameters, double(m->num_parameters())) << c->to_json();
  }
}

TEST(ModelRegistry, UntiedHeadIsItsOwnParameter) {
  models::GPT2Config c = models::GPT2Config::preset("gpt2-tiny");
  models::GPT2 tied(c, kMeta);
  c.tie_word_embeddings = false;
  models::GPT2 untied(c, kMeta);
  EXPECT_EQ(untied.num_parameters(), tied.num_parameters() + c.vocab_size * c.n_embd);
  EXPECT_EQ(untied.parameter("lm_head.weight").shape(), Shape({c.vocab_size, c.n_embd}));
  EXPECT_EQ(untied.named_parameters().back().first, "lm_head.weight");  // after the body, as in transformers
  EXPECT_EQ(untied.checkpoint_key_to_name("lm_head.weight"), "lm_head.weight");
  EXPECT_EQ(tied.checkpoint_key_to_name("lm_head.weight"), "");
  EXPECT_GT(tied.root_forward_flops({2, 8}), 0);  // the tied head is a matmul in the root
  EXPECT_EQ(untied.root_forward_flops({2, 8}), 0);  // the untied one a module of its own

  // On the CPU: the untied head's logits are h @ lm_head^T, not h @ wte^T.
  c.vocab_size = 256, c.n_positions = 16, c.n_embd = 16, c.n_layer = 1, c.n_head = 2;
  models::GPT2 m(c, {.seed = 3});
  m.eval();
  Tensor ids = from_ints({1, 2, 3}, {1, 3});
  Tensor want = linear(m.hidden_states(ids), m.parameter("lm_head.weight"), Tensor());
  std::vector<float> got = m.forward(ids).to_float_vector(), ref = want.to_float_vector();
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_FLOAT_EQ(got[i], ref[i]) << i;
  EXPECT_EQ(m.generate({1, 2}, 3, 0.0).size(), 5u);
}

TEST(ModelRegistry, RefusesModelsNoMachineHolds) {
  auto err = [](const std::string& text) { return message_of([&] { models::config_from_json(text); }); };
  std::string m = err(R"({"model_type": "gpt2", "n_inner": 4611686018427387904})");
  EXPECT_NE(m.find("GPT-2 model has 8.51e22 parameters = 3.4e23 bytes in f32"), std::string::npos) << m;
  EXPECT_NE(m.find("2^48"), std::string::npos) << m;
  m = err(R"({"model_type": "gpt2", "n_layer": 1000000000})");
  EXPECT_NE(m.find("1000000000 layers (n_layer)"), std::string::npos) << m;
  m = err(R"({"model_type": "gpt2", "n_embd": 4611686018427387904, "n_head": 1})");  // 4 * n_embd overflows
  EXPECT_NE(m.find("parameters"), std::string::npos) << m;
  m = err(R"({"model_type": "vit", "image_size": 4611686018427387904, "patch_size": 1})");  // (S/p)^2 wraps to 0
  EXPECT_NE(m.find("ViT model has"), std::string::npos) << m;
  m = err(R"({"model_type": "vit", "image_size": 2147483648, "patch_size": 2147483648})");  // p*p
  EXPECT_NE(m.find("ViT model has"), std::string::npos) << m;
  EXPECT_NE(err(R"({"model_type": "vit", "patch_size": 0})").find("patch_size = 0"), std::string::npos);
  EXPECT_NE(err(R"({"model_type": "gpt2", "n_head": 0})").find("n_head = 0"), std::string::npos);
  EXPECT_NE(err(R"({"model_type": "gpt2", "n_embd": 100, "n_head": 3})").find("not divisible"), std::string::npos);
  EXPECT_NE(err(R"({"model_type": "gpt2", "n_layer": 18446744073709551615})").find("64-bit"), std::string::npos);
  // A crafted class count is refused at once (a classifier's id2label and metrics are per class).
  for (const char* type : {"bert", "vit", "resnet"}) {
    m = err(std::string(R"({"model_type": ")") + type + R"(", "num_labels": 100000000000})");
    EXPECT_NE(m.find("num_labels = 100000000000"), std::string::npos) << type << ": " << m;
    EXPECT_NE(m.find("at most 1048576 classes"), std::string::npos) << type << ": " << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  // The largest accepted count writes its config.json without a million generated class names.
  auto wide = models::config_from_json(R"({"model_type": "bert", "num_labels": 1048576})");
  const std::string wide_json = wide->to_json();
  EXPECT_LT(wide_json.size(), size_t(4096));
  EXPECT_EQ(models::config_from_json(wide_json)->to_json(), wide_json);

  // Through the flags: the overrides are validated with the same limit.
  auto c = models::config_from_preset("gpt2-tiny");
  c->apply_overrides({.depth = 100000000});
  m = message_of([&] { c->validate(); });
  EXPECT_NE(m.find("100000000 layers"), std::string::npos) << m;
  auto v = models::config_from_preset("vit-tiny");
  EXPECT_NE(message_of([&] { v->apply_overrides({.dim = 30, .heads = 4}); }).find("not divisible by 4 heads"),
            std::string::npos);
  // The largest accepted depth is built on meta at once.
  auto deep = models::config_from_json(R"({"model_type": "gpt2", "vocab_size": 256, "n_positions": 8, "n_embd": 8,
                                          "n_head": 1, "n_layer": 10000})");
  EXPECT_EQ(deep->build(kMeta)->num_parameters(), int64_t(deep->size().parameters));
}

// Random config.json texts: the presets' configs with integer fields set to edge values (0,
// negative, huge, 2^63 - 1, past int64), wrong types, deleted keys and another model_type.
// Each must parse + validate + size to a model, or to one lt::Error; never crash or hang. A
// model that validates stays under the limit, and when small enough is built on meta, where its
// parameter count must equal the closed form.
TEST(ModelRegistry, MutatedConfigsNeverCrash) {
  std::mt19937_64 rng(20261124);
  const std::vector<nlohmann::json> edge = {0,
                                            -1,
                                            1,
                                            2,
                                            3,
                                            7,
                                            64,
                                            -4611686018427387904LL,
                                            std::numeric_limits<int64_t>::min(),
                                            std::numeric_limits<int64_t>::max(),
                                            int64_t(1) << 62,
                                            int64_t(1) << 32,
                                            int64_t(1) << 31,
                                            uint64_t(18446744073709551615ULL),
                                            1e30,
                                            2.5,
                                            "12",
                                            true,
                                            nullptr,
                                            nlohmann::json::array(),
                                            nlohmann::json::object()};
  std::vector<nlohmann::json> bases;
  for (const std::string& p : models::preset_names())
    bases.push_back(nlohmann::json::parse(models::config_from_preset(p)->to_json()));
  int built = 0, refused = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    nlohmann::json j = bases[rng() % bases.size()];
    std::vector<std::string> keys;
    for (auto& [k, val] : j.items()) keys.push_back(k);
    const int edits = 1 + int(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      const std::string& k = keys[rng() % keys.size()];
      switch (rng() % 8) {
        case 0: j.erase(k); break;
        case 1: j[k] = int64_t(rng() % 100000) - 1000; break;
        case 2: j["model_type"] = rng() % 2 ? "gpt2" : "vit"; break;
        default: j[k] = edge[rng() % edge.size()]; break;
      }
    }
    const std::string text = j.dump();
    try {
      auto c = models::config_from_json(text);
      const models::ModelSize s = c->size();
      ASSERT_LE(s.parameters, models::kMaxParameters) << text;
      ASSERT_LE(s.layers, models::kMaxLayers) << text;
      if (rng() % 2) {  // random flags on top, then validated as make_task does
        const int64_t o[] = {0, -1, 1, 3, 5, 100000000, std::numeric_limits<int64_t>::max()};
        const models::SizeOverrides ov{o[rng() % 7], o[rng() % 7], o[rng() % 7], o[rng() % 7], o[rng() % 7]};
        c->apply_overrides(ov);
        c->validate();
      }
      if (c->size().parameters < 4e8 && c->size().layers <= 24) {  // meta: no memory, little time
        auto m = c->build(kMeta);
        ASSERT_EQ(double(m->num_parameters()), c->size().parameters) << c->to_json();
        ++built;
      }
    } catch (const Error& e) {
      ASSERT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
      ++refused;
    }
  }
  EXPECT_GT(built, 100);  // the loop exercised both outcomes
  EXPECT_GT(refused, 1000);
}

}  // namespace
