// Parameter names, shapes and counts against the reference models (built on meta: no memory,
// no compute), presets, and config.json parsing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "leantrain/error.h"
#include "leantrain/models.h"

using namespace lt;

namespace {

using Spec = std::vector<std::pair<std::string, Shape>>;

Spec spec_of(const nn::Module& m) {
  Spec s;
  for (auto& [n, t] : m.named_parameters()) s.emplace_back(n, t.shape());
  return s;
}

// transformers' GPT2LMHeadModel.named_parameters() (lm_head.weight is tied, so not listed).
Spec gpt2_reference(int64_t V, int64_t P, int64_t C, int64_t L) {
  Spec s{{"transformer.wte.weight", {V, C}}, {"transformer.wpe.weight", {P, C}}};
  for (int64_t i = 0; i < L; ++i) {
    std::string h = "transformer.h." + std::to_string(i) + ".";
    Spec layer{{h + "ln_1.weight", {C}},          {h + "ln_1.bias", {C}},
               {h + "attn.c_attn.weight", {C, 3 * C}}, {h + "attn.c_attn.bias", {3 * C}},
               {h + "attn.c_proj.weight", {C, C}}, {h + "attn.c_proj.bias", {C}},
               {h + "ln_2.weight", {C}},          {h + "ln_2.bias", {C}},
               {h + "mlp.c_fc.weight", {C, 4 * C}},   {h + "mlp.c_fc.bias", {4 * C}},
               {h + "mlp.c_proj.weight", {4 * C, C}}, {h + "mlp.c_proj.bias", {C}}};
    s.insert(s.end(), layer.begin(), layer.end());
  }
  s.push_back({"transformer.ln_f.weight", {C}});
  s.push_back({"transformer.ln_f.bias", {C}});
  return s;
}

// torchvision's VisionTransformer.named_parameters().
Spec vit_reference(int64_t C, int64_t p, int64_t N, int64_t D, int64_t L, int64_t M, int64_t K) {
  Spec s{{"class_token", {1, 1, D}}, {"conv_proj.weight", {D, C, p, p}}, {"conv_proj.bias", {D}},
         {"encoder.pos_embedding", {1, N + 1, D}}};
  for (int64_t i = 0; i < L; ++i) {
    std::string e = "encoder.layers.encoder_layer_" + std::to_string(i) + ".";
    Spec layer{{e + "ln_1.weight", {D}},
               {e + "ln_1.bias", {D}},
               {e + "self_attention.in_proj_weight", {3 * D, D}},
               {e + "self_attention.in_proj_bias", {3 * D}},
               {e + "self_attention.out_proj.weight", {D, D}},
               {e + "self_attention.out_proj.bias", {D}},
               {e + "ln_2.weight", {D}},
               {e + "ln_2.bias", {D}},
               {e + "mlp.0.weight", {M, D}},
               {e + "mlp.0.bias", {M}},
               {e + "mlp.3.weight", {D, M}},
               {e + "mlp.3.bias", {D}}};
    s.insert(s.end(), layer.begin(), layer.end());
  }
  Spec tail{{"encoder.ln.weight", {D}}, {"encoder.ln.bias", {D}}, {"heads.head.weight", {K, D}}, {"heads.head.bias", {K}}};
  s.insert(s.end(), tail.begin(), tail.end());
  return s;
}

const nn::InitOptions kMeta{.device = Device::meta()};

template <class F>
void expect_error(F&& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(ModelsStructure, Gpt2_124mMatchesTransformers) {
  auto m = models::create_model("gpt2-124m", kMeta);
  EXPECT_EQ(spec_of(*m), gpt2_reference(50257, 1024, 768, 12));
  EXPECT_EQ(m->num_parameters(), 124'439'808);
  EXPECT_EQ(m->parameter_bytes(), 4 * 124'439'808);
  EXPECT_STREQ(m->type_name(), "GPT2LMHeadModel");
  EXPECT_STREQ(m->find_module("transformer")->type_name(), "GPT2Model");
  EXPECT_STREQ(m->find_module("transformer.h.3")->type_name(), "GPT2Block");
  EXPECT_STREQ(m->find_module("transformer.h.3.attn")->type_name(), "GPT2Attention");
  EXPECT_STREQ(m->find_module("transformer.h.3.attn.c_attn")->type_name(), "Conv1D");
  EXPECT_STREQ(m->find_module("transformer.h.3.mlp")->type_name(), "MLP");
  EXPECT_NE(m->find_module("transformer.h.11.mlp.dropout"), nullptr);
  EXPECT_EQ(m->find_module("transformer.h.12"), nullptr);
  EXPECT_EQ(m->model_type(), "gpt2");
}

TEST(ModelsStructure, VitB16AndL16MatchTorchvision) {
  auto b = models::create_model("vit-b-16", kMeta);
  EXPECT_EQ(spec_of(*b), vit_reference(3, 16, 196, 768, 12, 3072, 1000));
  EXPECT_EQ(b->num_parameters(), 86'567'656);
  EXPECT_STREQ(b->find_module("encoder.layers.encoder_layer_3")->type_name(), "EncoderBlock");
  EXPECT_STREQ(b->find_module("encoder.layers.encoder_layer_3.self_attention")->type_name(), "MultiheadAttention");
  auto l = models::create_model("vit-l-16", kMeta);
  EXPECT_EQ(spec_of(*l), vit_reference(3, 16, 196, 1024, 24, 4096, 1000));
  EXPECT_EQ(l->num_parameters(), 304'326'632);
}

TEST(ModelsStructure, SmallPresets) {
  auto g = models::create_model("gpt2-tiny", kMeta);
  auto& gc = dynamic_cast<models::GPT2&>(*g).config();
  EXPECT_EQ(gc.vocab_size, 256);
  EXPECT_EQ(spec_of(*g), gpt2_reference(256, gc.n_positions, gc.n_embd, gc.n_layer));
  EXPECT_LT(g->num_parameters(), 2'000'000);
  auto v = models::create_model("vit-tiny", kMeta);
  auto& vc = dynamic_cast<models::ViT&>(*v).config();
  EXPECT_EQ(vc.image_size, 28);
  EXPECT_EQ(vc.num_channels, 1);
  EXPECT_EQ(vc.num_labels, 10);
  EXPECT_EQ(spec_of(*v), vit_reference(1, vc.patch_size, vc.num_patches(), vc.hidden_size, vc.num_hidden_layers,
                                       vc.intermediate_size, 10));
  EXPECT_LT(v->num_parameters(), 500'000);
  for (const std::string& name : models::preset_names()) EXPECT_NO_THROW(models::create_model(name, kMeta)) << name;
  expect_error([] { models::create_model("gpt3", kMeta); }, "unknown model 'gpt3'");
}

TEST(ModelsStructure, Gpt2ConfigJson) {
  // Keys as in the config.json of Hugging Face's gpt2 (abridged).
  const char* hf = R"({"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
    "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12,
    "n_inner": null, "n_layer": 12, "n_positions": 1024, "resid_pdrop": 0.1, "vocab_size": 50257})";
  models::GPT2Config c = models::GPT2Config::from_json(hf);
  EXPECT_EQ(c.n_embd, 768);
  EXPECT_EQ(c.mlp_width(), 3072);
  EXPECT_EQ(c.gelu_approx(), GeluApprox::Tanh);
  EXPECT_DOUBLE_EQ(c.layer_norm_epsilon, 1e-5);
  auto m = models::create_model_from_json(hf, kMeta);
  EXPECT_EQ(m->num_parameters(), 124'439'808);

  models::GPT2Config t = models::GPT2Config::preset("gpt2-tiny");
  t.activation_function = "gelu";
  models::GPT2Config back = models::GPT2Config::from_json(t.to_json());
  EXPECT_EQ(back.vocab_size, 256);
  EXPECT_EQ(back.n_layer, t.n_layer);
  EXPECT_EQ(back.gelu_approx(), GeluApprox::Erf);
  EXPECT_EQ(back.resid_pdrop, 0.0);

  expect_error([] { models::GPT2Config::from_json(R"({"n_embd": 100, "n_head": 3})"); }, "not divisible by n_head 3");
  expect_error([] { models::GPT2Config::from_json(R"({"activation_function": "swish"})"); }, "'swish'");
  expect_error([] { models::GPT2Config::from_json(R"({"n_layer": "12"})"); }, "'n_layer' must be an integer");
  expect_error([] { models::GPT2Config::from_json(R"({"n_layer": 0})"); }, "n_layer = 0");
  expect_error([] { models::GPT2Config::from_json(R"({"resid_pdrop": 1.5})"); }, "resid_pdrop");
  expect_error([] { models::GPT2Config::from_json("{n_layer: 2"); }, "not valid JSON");
}

TEST(ModelsStructure, VitConfigJson) {
  const char* hf = R"({"model_type": "vit", "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
    "intermediate_size": 64, "image_size": 32, "patch_size": 8, "num_channels": 3, "layer_norm_eps": 1e-12,
    "hidden_act": "gelu", "id2label": {"0": "cat", "1": "dog", "2": "bird"}})";
  models::ViTConfig c = models::ViTConfig::from_json(hf);
  EXPECT_EQ(c.num_labels, 3);
  EXPECT_EQ(c.num_patches(), 16);
  EXPECT_DOUBLE_EQ(c.layer_norm_eps, 1e-12);
  models::ViTConfig back = models::ViTConfig::from_json(c.to_json());
  EXPECT_EQ(back.num_labels, 3);
  EXPECT_EQ(back.hidden_size, 32);
  auto m = models::create_model_from_json(hf, kMeta);
  EXPECT_EQ(m->model_type(), "vit");
  EXPECT_EQ(m->parameter("heads.head.weight").shape(), Shape({3, 32}));
  expect_error([] { models::ViTConfig::from_json(R"({"image_size": 30, "patch_size": 8})"); },
               "not divisible by patch_size 8");
  expect_error([] { models::ViTConfig::from_json(R"({"hidden_act": "relu"})"); }, "'relu'");
  expect_error([] { models::create_model_from_json(R"({"model_type": "t5"})", kMeta); }, "'t5'");
}

TEST(ModelsStructure, CreateFromConfigFileOrDirectory) {
  namespace fs = std::filesystem;
  fs::path d = fs::temp_directory_path() / ("lt_models_" + std::to_string(::getpid()));
  fs::create_directories(d);
  std::ofstream(d / "config.json") << models::GPT2Config::preset("gpt2-tiny").to_json();
  auto a = models::create_model((d / "config.json").string(), kMeta);
  auto b = models::create_model(d.string(), kMeta);
  EXPECT_EQ(a->num_parameters(), b->num_parameters());
  EXPECT_EQ(a->config_json(), models::GPT2Config::preset("gpt2-tiny").to_json());
  expect_error([&] { models::create_model((d / "nope.json").string(), kMeta); }, "nope.json");
  fs::remove_all(d);
}

TEST(ModelsStructure, Gpt2CheckpointKeys) {
  models::GPT2 m(models::GPT2Config::preset("gpt2-tiny"), kMeta);
  EXPECT_EQ(m.checkpoint_key_to_name("h.0.ln_1.weight"), "transformer.h.0.ln_1.weight");
  EXPECT_EQ(m.checkpoint_key_to_name("transformer.wte.weight"), "transformer.wte.weight");
  EXPECT_EQ(m.checkpoint_key_to_name("h.3.attn.bias"), "");
  EXPECT_EQ(m.checkpoint_key_to_name("transformer.h.3.attn.masked_bias"), "");
  EXPECT_EQ(m.checkpoint_key_to_name("h.3.attn.c_attn.bias"), "transformer.h.3.attn.c_attn.bias");
  EXPECT_EQ(m.checkpoint_key_to_name("lm_head.weight"), "");
}

TEST(ModelsSampling, TemperatureTopKAndGreedy) {
  std::vector<float> logits{0.0f, 2.0f, 1.0f, -1.0f};
  EXPECT_EQ(models::sample_token(logits, 0.0, 0, 1, 0), 1);
  for (uint64_t c = 0; c < 50; ++c) EXPECT_EQ(models::sample_token(logits, 1.0, 1, 9, c), 1);
  std::vector<int> hist(4, 0);
  const int n = 20000;
  for (int c = 0; c < n; ++c) ++hist[size_t(models::sample_token(logits, 1.0, 0, 3, uint64_t(c)))];
  double z = 1 + std::exp(2.0) + std::exp(1.0) + std::exp(-1.0);
  EXPECT_NEAR(hist[1] / double(n), std::exp(2.0) / z, 0.015);
  EXPECT_NEAR(hist[3] / double(n), std::exp(-1.0) / z, 0.01);
  std::fill(hist.begin(), hist.end(), 0);
  for (int c = 0; c < 2000; ++c) ++hist[size_t(models::sample_token(logits, 1.0, 2, 3, uint64_t(c)))];
  EXPECT_EQ(hist[0] + hist[3], 0);  // outside the top 2
  EXPECT_GT(hist[2], 0);
  EXPECT_EQ(models::sample_token(logits, 0.7, 0, 5, 42), models::sample_token(logits, 0.7, 0, 5, 42));
}

TEST(ModelsStructure, InitFollowsReferences) {
  auto std_of = [](const Tensor& t) {
    auto v = t.to_double_vector();
    double s = 0;
    for (double x : v) s += x * x;
    return std::sqrt(s / double(v.size()));
  };
  models::GPT2Config c = models::GPT2Config::preset("gpt2-tiny");
  c.n_layer = 8;
  models::GPT2 g(c, {.seed = 1});
  EXPECT_NEAR(std_of(g.parameter("transformer.wte.weight")), 0.02, 1e-3);
  EXPECT_NEAR(std_of(g.parameter("transformer.h.0.attn.c_attn.weight")), 0.02, 1e-3);
  EXPECT_NEAR(std_of(g.parameter("transformer.h.0.attn.c_proj.weight")), 0.02 / 4, 3e-4);  // 1/sqrt(2 * 8)
  EXPECT_NEAR(std_of(g.parameter("transformer.h.7.mlp.c_proj.weight")), 0.02 / 4, 3e-4);
  EXPECT_NEAR(std_of(g.parameter("transformer.h.7.mlp.c_fc.weight")), 0.02, 1e-3);
  EXPECT_EQ(std_of(g.parameter("transformer.h.1.mlp.c_fc.bias")), 0.0);
  auto ln = g.parameter("transformer.ln_f.weight").to_float_vector();
  EXPECT_TRUE(std::all_of(ln.begin(), ln.end(), [](float x) { return x == 1.0f; }));

  models::ViT v(models::ViTConfig::preset("vit-tiny"), {.seed = 2});
  EXPECT_EQ(std_of(v.parameter("class_token")), 0.0);
  EXPECT_EQ(std_of(v.parameter("heads.head.weight")), 0.0);
  EXPECT_NEAR(std_of(v.parameter("conv_proj.weight")), 1.0 / 7.0, 0.02);  // sqrt(1 / fan_in), fan_in = 49
  EXPECT_NEAR(std_of(v.parameter("encoder.pos_embedding")), 0.02, 3e-3);
  EXPECT_GT(std_of(v.parameter("encoder.layers.encoder_layer_0.self_attention.in_proj_weight")), 0.05);
}
