// Gemma 3 text (models/gemma3.h) on the CPU: config.json in (gemma3_text, a gemma3 checkpoint's
// text_config, transformers 5's rope_parameters) and out, the refusals (one line each), the
// presets' names, shapes and sizes; logits and every gradient against a reference written with
// plain ops in f64 (separate projections, x * rsqrt(mean x^2 + eps) * (1 + w), gelu(gate) * up,
// rotate-half RoPE of each layer type's base, repeated K/V heads, the soft cap), a gradcheck, the
// multimodal checkpoint's key names, and a short training run.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>

#include "leantrain/autograd.h"
#include "leantrain/random.h"
#include "leantrain/safetensors.h"
#include "models/gemma3.h"
#include "models/registry.h"
#include "unit/error_of.h"
#include "unit/gradcheck.h"

using namespace lt;
using models::Gemma3;
using models::Gemma3Config;
using lt::test::error_of;

namespace {

Gemma3Config parse(const std::string& text) { return Gemma3Config::from_json(nlohmann::json::parse(text)); }

void expect_refused(const std::string& text, const std::string& fragment) {
  const std::string m = error_of([&] { models::config_from_json(text); });
  EXPECT_NE(m.find(fragment), std::string::npos) << text << "\n -> " << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

// google/gemma-3-1b-pt's config.json as published (transformers 4.50).
const char* kGemma1b = R"({"architectures": ["Gemma3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "attn_logit_softcapping": null, "bos_token_id": 2, "cache_implementation": "hybrid", "eos_token_id": 1,
  "final_logit_softcapping": null, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152,
  "initializer_range": 0.02, "intermediate_size": 6912, "max_position_embeddings": 32768, "model_type": "gemma3_text",
  "num_attention_heads": 4, "num_hidden_layers": 26, "num_key_value_heads": 1, "pad_token_id": 0,
  "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000, "rope_scaling": null,
  "rope_theta": 1000000, "sliding_window": 512, "sliding_window_pattern": 6, "torch_dtype": "bfloat16",
  "transformers_version": "4.50.0.dev0", "use_cache": true, "vocab_size": 262144})";

TEST(Gemma3Config, ReadsTheRealConfigsAndRoundTrips) {
  Gemma3Config c = parse(kGemma1b);
  EXPECT_EQ(c.hidden_size, 1152);
  EXPECT_EQ(c.num_key_value_heads, 1);
  EXPECT_EQ(c.sliding_window, 512);
  for (int64_t i = 0; i < 26; ++i) EXPECT_EQ(c.is_sliding(i), (i + 1) % 6 != 0) << i;  // full at 5, 11, 17, 23
  EXPECT_EQ(c.num_parameters(), 999'885'952.0);
  EXPECT_EQ(parse(c.to_json()).to_json(), c.to_json());
  EXPECT_EQ(Gemma3Config::preset("gemma3-1b").to_json(), c.to_json());  // the preset is this file
  const nlohmann::json j = nlohmann::json::parse(c.to_json());
  EXPECT_EQ(j["architectures"], nlohmann::json({"Gemma3ForCausalLM"}));
  EXPECT_EQ(j["layer_types"][5], "full_attention");
  EXPECT_EQ(j["layer_types"][4], "sliding_attention");
  EXPECT_EQ(&models::config_from_json(c.to_json())->family(), &models::family_of_type("gemma3_text"));

  // google/gemma-3-4b-pt: a gemma3 (multimodal) config; the text tower's fields in text_config,
  // Gemma3TextConfig's defaults for the rest (8 heads on 4, the 262,208-id vocabulary).
  Gemma3Config m = Gemma3Config::from_json(nlohmann::json::parse(R"({"architectures": ["Gemma3ForConditionalGeneration"],
    "boi_token_index": 255999, "eoi_token_index": 256000, "eos_token_id": [1, 106], "image_token_index": 262144,
    "initializer_range": 0.02, "mm_tokens_per_image": 256, "model_type": "gemma3",
    "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
      "num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024},
    "torch_dtype": "bfloat16", "vision_config": {"hidden_size": 1152, "model_type": "siglip_vision_model"}})"));
  EXPECT_EQ(m.vocab_size, 262208);
  EXPECT_EQ(m.num_attention_heads, 8);
  EXPECT_EQ(m.num_key_value_heads, 4);
  EXPECT_EQ(m.rope_scaling.type, "linear");
  EXPECT_EQ(m.rope_scaling.factor, 8.0);
  EXPECT_EQ(m.kept["eos_token_id"], nlohmann::json({1, 106}));
  EXPECT_EQ(nlohmann::json::parse(m.to_json())["model_type"], "gemma3_text");

  // transformers 5: layer_types and one rope_parameters object per layer type.
  Gemma3Config t = parse(R"({"model_type": "gemma3_text", "num_hidden_layers": 3,
    "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
    "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 500000.0},
                        "sliding_attention": {"rope_type": "default", "rope_theta": 20000.0}},
    "final_logit_softcapping": 30.0})");
  EXPECT_TRUE(t.is_sliding(0) && !t.is_sliding(1) && t.is_sliding(2));
  EXPECT_EQ(t.rope_theta, 500000.0);
  EXPECT_EQ(t.rope_local_base_freq, 20000.0);
  EXPECT_EQ(t.rope_scaling.factor, 4.0);
  EXPECT_EQ(t.final_logit_softcapping, 30.0);
  EXPECT_EQ(parse(t.to_json()).to_json(), t.to_json());
}

TEST(Gemma3Config, RefusalsAreOneLine) {
  const std::string h = R"({"model_type": "gemma3_text", "hidden_size": 32, "num_attention_heads": 2,
    "num_key_value_heads": 1, "head_dim": 16, "num_hidden_layers": 2, "vocab_size": 300, )";
  expect_refused(h + R"("attn_logit_softcapping": 50.0})", "'attn_logit_softcapping' is set");
  expect_refused(h + R"("final_logit_softcapping": -1.0})", "'final_logit_softcapping' = -1");
  expect_refused(h + R"("hidden_activation": "silu"})", "hidden_activation 'silu' is not supported");
  expect_refused(h + R"("attention_bias": true})", "'attention_bias' is true");
  expect_refused(h + R"("use_bidirectional_attention": true})", "'use_bidirectional_attention' is true");
  expect_refused(h + R"("sliding_window": null})", "'sliding_window' is null");
  expect_refused(h + R"("layer_types": ["full_attention"]})", "layer_types has 1 entries for 2 layers");
  expect_refused(h + R"("layer_types": ["full_attention", "chunked_attention"]})", "layer_types entry \"chunked_attention\"");
  expect_refused(h + R"("rope_parameters": {"sliding_attention": {"rope_type": "linear", "factor": 2.0}}})",
                 "rope_parameters.sliding_attention has rope_type 'linear'");
  expect_refused(h + R"("rope_scaling": {"rope_type": "yarn", "factor": 2.0}})", "type 'yarn' is not supported");
  expect_refused(h + R"("num_key_value_heads": 3})", "not divisible by num_key_value_heads 3");
  expect_refused(h + R"("head_dim": 7})", "head_dim 7");
  expect_refused(h + R"("query_pre_attn_scalar": 0})", "query_pre_attn_scalar = 0");
  expect_refused(h + R"("attention_dropout": 0.1})", "attention_dropout");
  expect_refused(h + R"("eos_token_id": 300})", "'eos_token_id' = 300");
  expect_refused(R"({"model_type": "gemma3", "text_config": 5})", "gemma3 'text_config' is 5");
}

// Every parameter redrawn (the (1 + w) norms init to zeros), so a wrong norm or head shows.
void randomize(Gemma3& m, uint64_t seed) {
  Generator gen(seed);
  NoGradGuard ng;
  for (auto& [n, p] : m.named_parameters()) copy_(p, randn(p.shape(), gen, 0.3f, p.dtype()));
}

Tensor ids_of(int64_t B, int64_t T, int64_t V, uint64_t seed) {
  std::vector<int64_t> v(size_t(B * T));
  for (size_t i = 0; i < v.size(); ++i) v[i] = int64_t(rng_mix64(seed * 7919 + i) % uint64_t(V));
  return from_ints(v, {B, T});
}

Gemma3Config small(int64_t layers, bool tied) {
  Gemma3Config c;
  c.vocab_size = 37, c.hidden_size = 12, c.intermediate_size = 20, c.num_hidden_layers = layers;
  c.num_attention_heads = 3, c.num_key_value_heads = 1, c.head_dim = 6, c.query_pre_attn_scalar = 5;
  c.max_position_embeddings = 64, c.sliding_window = 16, c.sliding_window_pattern = 2, c.rms_norm_eps = 1e-6;
  c.rope_theta = 1e6, c.rope_local_base_freq = 1e4, c.rope_scaling = models::RopeScaling{.type = "linear", .factor = 8.0};
  c.tie_word_embeddings = tied;
  return c;
}

// transformers' Gemma3ForCausalLM forward, op by op, in f64 on the model's parameters.
Tensor reference_logits(const Gemma3& m, const Tensor& ids, const Tensor& mask) {
  const Gemma3Config& c = m.config();
  const int64_t B = ids.size(0), T = ids.size(1), H = c.num_attention_heads, K = c.num_key_value_heads, D = c.head_dim;
  std::map<std::string, Tensor> p;
  for (auto& [n, t] : m.named_parameters()) p[n] = t;
  auto norm = [&](const Tensor& x, const std::string& n) {
    return mul(div(x, sqrt(add_scalar(mean(mul(x, x), {-1}, true), c.rms_norm_eps))), add_scalar(p[n], 1.0));
  };
  auto rope_tables = [&](double theta, double factor) {
    std::vector<double> cv, sv;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < D; ++j) {
        const double a = double(t) / std::pow(theta, double(2 * (j % (D / 2))) / double(D)) / factor;
        cv.push_back(std::cos(a)), sv.push_back(std::sin(a));
      }
    return std::pair{from_vector(cv, {1, 1, T, D}), from_vector(sv, {1, 1, T, D})};
  };
  const auto global = rope_tables(c.rope_theta, c.rope_scaling.type.empty() ? 1.0 : c.rope_scaling.factor);
  const auto local = rope_tables(c.rope_local_base_freq, 1.0);
  auto heads = [&](const Tensor& y, int64_t n) { return permute(reshape(y, {B, T, n, D}), {0, 2, 1, 3}); };
  auto repeat_kv = [&](const Tensor& kv) {
    return reshape(contiguous(expand(reshape(contiguous(kv), {B, K, 1, T, D}), {B, K, H / K, T, D})), {B, H, T, D});
  };
  // transformers' nn.Embedding(padding_idx=pad_token_id): pad lookups add no gradient.
  Tensor x = scale(embedding(ids, p["model.embed_tokens.weight"], c.padding_idx()), std::sqrt(double(c.hidden_size)));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string f = "model.layers." + std::to_string(l) + ".", a = f + "self_attn.";
    // Not a structured binding: clang 14 (the sanitizer build) cannot capture one in a lambda.
    const auto& tables = c.is_sliding(l) ? local : global;
    const Tensor& cos = tables.first;
    const Tensor& sin = tables.second;
    auto rope = [&](const Tensor& y) {
      Tensor rot = concat({neg(slice(y, 3, D / 2, D)), slice(y, 3, 0, D / 2)}, 3);
      return add(mul(y, cos), mul(rot, sin));
    };
    Tensor h = norm(x, f + "input_layernorm.weight");
    Tensor q = rope(norm(heads(linear(h, p[a + "q_proj.weight"], Tensor()), H), a + "q_norm.weight"));
    Tensor k = rope(norm(heads(linear(h, p[a + "k_proj.weight"], Tensor()), K), a + "k_norm.weight"));
    Tensor v = heads(linear(h, p[a + "v_proj.weight"], Tensor()), K);
    // Sliding layers: the attention's window rule (checked against a naive one in test_attention_window).
    const AttentionMask am{true, mask, c.is_sliding(l) ? c.sliding_window : 0, Tensor()};
    Tensor o = scaled_dot_product_attention(q, repeat_kv(k), repeat_kv(v), am, 1.0 / std::sqrt(c.query_pre_attn_scalar));
    o = linear(reshape(contiguous(permute(o, {0, 2, 1, 3})), {B, T, H * D}), p[a + "o_proj.weight"], Tensor());
    x = add(x, norm(o, f + "post_attention_layernorm.weight"));
    h = norm(x, f + "pre_feedforward_layernorm.weight");
    Tensor act = mul(gelu(linear(h, p[f + "mlp.gate_proj.weight"], Tensor()), GeluApprox::Tanh),
                     linear(h, p[f + "mlp.up_proj.weight"], Tensor()));
    x = add(x, norm(linear(act, p[f + "mlp.down_proj.weight"], Tensor()), f + "post_feedforward_layernorm.weight"));
  }
  x = norm(x, "model.norm.weight");
  Tensor logits = linear(x, c.tie_word_embeddings ? p["model.embed_tokens.weight"] : p["lm_head.weight"], Tensor());
  const double cap = c.final_logit_softcapping;
  return cap > 0 ? scale(tanh(scale(logits, 1.0 / cap)), cap) : logits;
}

void expect_matches_reference(Gemma3& m, const Tensor& ids, const Tensor& mask) {
  Generator gen(99);
  const Tensor r = randn({ids.size(0), ids.size(1), m.config().vocab_size}, gen, 1.0f, DType::F64);
  auto run = [&](bool reference) {
    zero_grad(m.parameters());
    Tensor logits = reference ? reference_logits(m, ids, mask) : m.forward(ids, mask);
    sum_all(mul(logits, r)).backward();
    std::map<std::string, std::vector<double>> out{{"logits", logits.to_double_vector()}};
    for (auto& [n, p] : m.named_parameters()) out[n] = p.grad().to_double_vector();
    return out;
  };
  auto want = run(true), got = run(false);
  for (auto& [name, w] : want) {
    const std::vector<double>& g = got[name];
    ASSERT_EQ(g.size(), w.size()) << name;
    double s = 1e-12;
    for (double v : w) s = std::max(s, std::abs(v));
    // 1e-6: RoPE's frequencies and angles are f32 (as transformers computes them), the rest f64.
    for (size_t i = 0; i < w.size(); ++i) ASSERT_NEAR(g[i], w[i], 1e-6 * s) << name << " [" << i << "]";
  }
}

const nn::InitOptions kF64{.dtype = DType::F64, .seed = 3};

TEST(Gemma3Model, MatchesTheReferenceTiedAndUntied) {
  Gemma3Config c = small(2, true);  // layer 0 sliding (local base), layer 1 full (scaled global base)
  Gemma3 m(c, kF64);
  EXPECT_EQ(double(m.num_parameters()), c.num_parameters());
  EXPECT_EQ(m.parameter("model.layers.1.post_feedforward_layernorm.weight").shape(), Shape({12}));
  EXPECT_EQ(m.parameter("model.layers.0.self_attn.q_norm.weight").shape(), Shape({6}));
  EXPECT_EQ(m.parameter("model.layers.0.self_attn.q_proj.weight").shape(), Shape({18, 12}));
  for (auto& [n, p] : m.named_parameters())  // (1 + w) norms start at w = 0
    if (n.find("norm") != std::string::npos) EXPECT_EQ(p.to_double_vector()[0], 0.0) << n;
  EXPECT_EQ(c.padding_idx(), 0);  // Gemma3TextConfig's default pad_token_id
  EXPECT_EQ(m.parameter("model.embed_tokens.weight").to_double_vector()[0], 0.0);  // zeroed at init, as transformers
  randomize(m, 1);
  const Tensor mask = from_ints({1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0}, {2, 7}, DType::U8);
  expect_matches_reference(m, ids_of(2, 7, 37, 1), mask);
  c = small(3, false);
  c.final_logit_softcapping = 2.0;  // small enough to bend the random logits
  Gemma3 u(c, kF64);
  randomize(u, 2);
  expect_matches_reference(u, ids_of(3, 5, 37, 2), Tensor());
  // Pad lookups (id 0) add no gradient to the untied table's row 0, as in transformers.
  expect_matches_reference(u, from_ints({0, 4, 0, 9, 0, 2}, {2, 3}), Tensor());
  EXPECT_EQ(u.parameter("model.embed_tokens.weight").grad().to_double_vector()[0], 0.0);
  EXPECT_GT(u.loss(ids_of(3, 5, 37, 2), ids_of(3, 5, 37, 3)).item(), 0.0);  // the unfused (capped) loss path
}

TEST(Gemma3Model, Gradcheck) {
  Gemma3Config c = small(2, true);
  c.vocab_size = 9, c.hidden_size = 8, c.intermediate_size = 6, c.num_attention_heads = 2, c.head_dim = 4;
  c.final_logit_softcapping = 3.0;
  c.kept["pad_token_id"] = nullptr;  // a padding index's lookups have no gradient, by design
  Gemma3 m(c, kF64);
  randomize(m, 4);
  const Tensor ids = ids_of(2, 4, 9, 4);
  EXPECT_TRUE(test::gradcheck([&](const std::vector<Tensor>&) { return m.forward(ids); }, m.parameters()));
}

TEST(Gemma3Model, SlidingLayersSeeTheirWindow) {
  // Window 3 < T 8 on the sliding layers (0 and 2), full attention on layer 1.
  Gemma3Config c = small(3, true);
  c.sliding_window = 3;
  Gemma3 m(c, kF64);
  randomize(m, 5);
  expect_matches_reference(m, ids_of(2, 8, 37, 5), Tensor());
  // The window changes the logits (else this test could not fail).
  c.sliding_window = 16;
  Gemma3 wide(c, kF64);
  randomize(wide, 5);
  NoGradGuard ng;
  EXPECT_NE(wide.forward(ids_of(2, 8, 37, 5)).to_double_vector(), m.forward(ids_of(2, 8, 37, 5)).to_double_vector());
}

TEST(Gemma3Model, Presets) {
  struct Want {
    const char* preset;
    int64_t parameters;
  };
  // 270m and 1b as transformers counts them (tied); 4b's text tower.
  for (const Want& w : {Want{"gemma3-270m", 268'098'176}, Want{"gemma3-1b", 999'885'952},
                        Want{"gemma3-4b", 3'880'263'168}, Want{"gemma3-tiny", 0}}) {
    auto m = models::create_model(w.preset, {.device = Device::meta()});
    if (w.parameters) EXPECT_EQ(m->num_parameters(), w.parameters) << w.preset;
    EXPECT_STREQ(m->type_name(), "Gemma3ForCausalLM");
    EXPECT_EQ(double(m->num_parameters()), Gemma3Config::preset(w.preset).num_parameters()) << w.preset;
  }
  auto m = models::create_model("gemma3-1b", {.device = Device::meta()});
  EXPECT_STREQ(m->find_module("model.layers.3")->type_name(), "Gemma3DecoderLayer");
  EXPECT_STREQ(m->find_module("model.layers.3.self_attn")->type_name(), "Gemma3Attention");
  EXPECT_STREQ(m->find_module("model.layers.3.mlp")->type_name(), "Gemma3MLP");
  EXPECT_NE(m->find_module("model.layers.3.pre_feedforward_layernorm"), nullptr);
  EXPECT_EQ(m->find_module("lm_head"), nullptr);  // tied
}

TEST(Gemma3Model, ReadsAMultimodalCheckpointsTextTower) {
  Gemma3Config c = small(2, true);
  Gemma3 src(c, {.seed = 7}), dst(c, {.seed = 8});
  randomize(src, 9);
  // transformers >= 4.52 names: model.language_model.*, plus a vision tower that is skipped.
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (auto& [n, p] : src.named_parameters())
    tensors.push_back({"model.language_model." + n.substr(std::string("model.").size()), p});
  tensors.push_back({"model.vision_tower.vision_model.post_layernorm.weight", ones({4})});
  tensors.push_back({"model.multi_modal_projector.mm_soft_emb_norm.weight", ones({4})});
  tensors.push_back({"lm_head.weight", src.parameter("model.embed_tokens.weight")});
  const std::string path = ::testing::TempDir() + "gemma3_mm.safetensors";
  io::save_safetensors(path, tensors);
  const io::LoadResult r = io::load_module(dst, path);
  EXPECT_EQ(r.skipped.size(), 3u);
  const Tensor ids = ids_of(2, 6, 37, 10);
  NoGradGuard ng;
  EXPECT_EQ(dst.forward(ids).to_double_vector(), src.forward(ids).to_double_vector());
  EXPECT_EQ(dst.checkpoint_key_to_name("language_model.model.layers.0.mlp.up_proj.weight"), "model.layers.0.mlp.up_proj.weight");
  EXPECT_EQ(dst.checkpoint_key_to_name("model.rotary_emb_local.inv_freq"), "");
  std::remove(path.c_str());
}

TEST(Gemma3Model, Trains) {
  Gemma3Config c = small(2, true);
  c.vocab_size = 64, c.hidden_size = 32, c.intermediate_size = 48;
  Gemma3 m(c, {.seed = 10});
  const Tensor seq = ids_of(4, 13, 64, 10);
  const Tensor x = contiguous(slice(seq, 1, 0, 12)), y = contiguous(slice(seq, 1, 1, 13));
  std::vector<double> losses;
  for (int s = 0; s < 30; ++s) {
    zero_grad(m.parameters());
    Tensor loss = m.loss(x, y);
    losses.push_back(loss.item());
    loss.backward();
    NoGradGuard ng;
    for (Tensor& p : m.parameters()) add_(p, scale(p.grad(), -0.3));
  }
  EXPECT_LT((losses[27] + losses[28] + losses[29]) / 3, 0.85 * losses.front());
}

}  // namespace
