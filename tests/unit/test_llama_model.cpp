// The LLaMA-family model on the CPU: logits and every parameter gradient against a reference
// written with plain ops (separate q/k/v GEMMs, rotate_half from slices, K/V heads repeated
// explicitly, silu then mul) in f64; a finite-difference gradcheck; the presets' parameter names
// and shapes against transformers'; checkpoint names, checkpointing, position offsets,
// generation and a short training run.
#include <gtest/gtest.h>

#include "train/recipe_table.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "leantrain/autograd.h"
#include "leantrain/checkpoint.h"
#include "leantrain/error.h"
#include "leantrain/plan.h"
#include "leantrain/train.h"
#include "models/llama.h"
#include "unit/gradcheck.h"

using namespace lt;
using models::Llama;
using models::LlamaConfig;

namespace {

LlamaConfig small(const std::string& type, int64_t V, int64_t C, int64_t F, int64_t L, int64_t H, int64_t K) {
  LlamaConfig c = LlamaConfig::defaults(type);
  c.vocab_size = V, c.hidden_size = C, c.intermediate_size = F, c.num_hidden_layers = L;
  c.num_attention_heads = H, c.num_key_value_heads = K, c.max_position_embeddings = 64, c.rms_norm_eps = 1e-5;
  return c;
}

// Every parameter redrawn (norm weights and biases too, which init to ones and zeros), so that a
// wrong norm, bias or head is visible.
void randomize(Llama& m, uint64_t seed) {
  Generator gen(seed);
  NoGradGuard ng;
  for (auto& [n, p] : m.named_parameters()) copy_(p, randn(p.shape(), gen, 0.3f, p.dtype()));
}

Tensor ids_of(int64_t B, int64_t T, int64_t V, uint64_t seed) {
  std::vector<int64_t> v(size_t(B * T));
  for (size_t i = 0; i < v.size(); ++i) v[i] = int64_t(rng_mix64(seed * 7919 + i) % uint64_t(V));
  return from_ints(v, {B, T});
}

// transformers' inverse frequencies, in f64 (the formulas of modeling_rope_utils.py).
std::vector<double> exact_frequencies(const LlamaConfig& c) {
  const int64_t D = c.head_size();
  std::vector<double> inv;
  for (int64_t i = 0; i < D; i += 2) inv.push_back(1.0 / std::pow(c.rope_theta, double(i) / double(D)));
  const models::RopeScaling& s = c.rope_scaling;
  for (double& f : inv) {
    if (s.type == "linear") f /= s.factor;
    if (s.type != "llama3") continue;
    const double wavelen = 2 * M_PI / f, orig = double(s.original_max_position_embeddings);
    if (wavelen < orig / s.high_freq_factor) continue;
    if (wavelen > orig / s.low_freq_factor) {
      f /= s.factor;
      continue;
    }
    const double smooth = (orig / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
    f = (1 - smooth) * f / s.factor + smooth * f;
  }
  return inv;
}

// transformers' LlamaForCausalLM forward, op by op, on the model's own parameters.
Tensor reference_logits(const Llama& m, const Tensor& ids, const Tensor& mask) {
  const LlamaConfig& c = m.config();
  const int64_t B = ids.size(0), T = ids.size(1), H = c.num_attention_heads, K = c.kv_heads(), D = c.head_size();
  std::map<std::string, Tensor> p;
  for (auto& [n, t] : m.named_parameters()) p[n] = t;
  auto bias = [&](const std::string& n) { return p.count(n) ? p[n] : Tensor(); };
  // cos, sin [1, 1, T, D]: emb = cat(freqs, freqs), freqs = position * inv_freq.
  const std::vector<double> inv = exact_frequencies(c);
  std::vector<double> cv, sv;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < D; ++j) {
      const double a = double(t) * inv[size_t(j % (D / 2))];
      cv.push_back(std::cos(a)), sv.push_back(std::sin(a));
    }
  const Tensor cos = from_vector(cv, {1, 1, T, D}), sin = from_vector(sv, {1, 1, T, D});
  auto rotate_half = [&](const Tensor& x) { return concat({neg(slice(x, 3, D / 2, D)), slice(x, 3, 0, D / 2)}, 3); };
  auto rope = [&](const Tensor& x) { return add(mul(x, cos), mul(rotate_half(x), sin)); };
  auto heads = [&](const Tensor& y, int64_t n) { return permute(reshape(y, {B, T, n, D}), {0, 2, 1, 3}); };
  auto repeat_kv = [&](const Tensor& kv) {  // [B, K, T, D] -> [B, H, T, D]: query head h reads kv head h / (H / K)
    return reshape(contiguous(expand(reshape(contiguous(kv), {B, K, 1, T, D}), {B, K, H / K, T, D})), {B, H, T, D});
  };
  Tensor x = embedding(ids, p["model.embed_tokens.weight"]);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string a = "model.layers." + std::to_string(l) + ".self_attn.", f = "model.layers." + std::to_string(l) + ".";
    // Qwen3's q_norm / k_norm: an RMSNorm over each head's D channels, before RoPE.
    auto head_norm = [&](const Tensor& t, const std::string& n) { return p.count(n) ? rms_norm(t, p[n], c.rms_norm_eps) : t; };
    Tensor h = rms_norm(x, p[f + "input_layernorm.weight"], c.rms_norm_eps);
    Tensor q = rope(head_norm(heads(linear(h, p[a + "q_proj.weight"], bias(a + "q_proj.bias")), H), a + "q_norm.weight"));
    Tensor k = rope(head_norm(heads(linear(h, p[a + "k_proj.weight"], bias(a + "k_proj.bias")), K), a + "k_norm.weight"));
    Tensor v = heads(linear(h, p[a + "v_proj.weight"], bias(a + "v_proj.bias")), K);
    // A sliding layer: the attention's window rule (tested against a naive one in test_attention_window).
    const int64_t w = c.window_of(l);
    Tensor o = w > 0 ? scaled_dot_product_attention(q, repeat_kv(k), repeat_kv(v), AttentionMask{true, mask, w, Tensor()})
                     : scaled_dot_product_attention(q, repeat_kv(k), repeat_kv(v), true, mask);
    o = reshape(contiguous(permute(o, {0, 2, 1, 3})), {B, T, H * D});
    x = add(x, linear(o, p[a + "o_proj.weight"], bias(a + "o_proj.bias")));
    h = rms_norm(x, p[f + "post_attention_layernorm.weight"], c.rms_norm_eps);
    const std::string g = f + "mlp.";
    Tensor act = mul(silu(linear(h, p[g + "gate_proj.weight"], bias(g + "gate_proj.bias"))),
                     linear(h, p[g + "up_proj.weight"], bias(g + "up_proj.bias")));
    x = add(x, linear(act, p[g + "down_proj.weight"], bias(g + "down_proj.bias")));
  }
  x = rms_norm(x, p["model.norm.weight"], c.rms_norm_eps);
  return linear(x, c.tie_word_embeddings ? p["model.embed_tokens.weight"] : p["lm_head.weight"], Tensor());
}

// Logits of the model and of the reference, and every parameter's gradient of sum(logits * R).
void expect_matches_reference(Llama& m, const Tensor& ids, const Tensor& mask, double tol) {
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
    double scale = 1e-12;
    for (double v : w) scale = std::max(scale, std::abs(v));
    for (size_t i = 0; i < w.size(); ++i) ASSERT_NEAR(g[i], w[i], tol * scale) << name << " [" << i << "]";
  }
}

bool qkv_adjacent(const Llama& m, int64_t layer) {
  const std::string a = "model.layers." + std::to_string(layer) + ".self_attn.";
  Tensor q = m.parameter(a + "q_proj.weight"), k = m.parameter(a + "k_proj.weight"), v = m.parameter(a + "v_proj.weight");
  return q.storage() == k.storage() && k.offset() == q.offset() + q.numel() && v.offset() == k.offset() + k.numel();
}

const nn::InitOptions kF64{.dtype = DType::F64, .seed = 3};

TEST(LlamaModel, GroupedQueriesTiedMatchReference) {
  LlamaConfig c = small("llama", 40, 16, 24, 2, 4, 2);
  c.tie_word_embeddings = true;
  Llama m(c, kF64);
  EXPECT_TRUE(qkv_adjacent(m, 1));  // the one-GEMM view
  randomize(m, 1);
  expect_matches_reference(m, ids_of(2, 7, 40, 1), Tensor(), 1e-6);
}

// pad_token_id makes embed_tokens' padding_idx, as transformers builds it: the pad row starts at
// zero and its lookups add no gradient; the head (untied) still trains every row.
TEST(LlamaModel, PadTokenLookupsAddNoGradient) {
  for (const char* type : {"llama", "qwen3"}) {
    LlamaConfig c = small(type, 40, 16, 24, 1, 4, 2);
    c.kept["pad_token_id"] = 5;
    Llama m(c, kF64);
    const Tensor& table = m.parameter("model.embed_tokens.weight");
    for (int64_t j = 0; j < 16; ++j) EXPECT_EQ(table.to_double_vector()[size_t(5 * 16 + j)], 0.0) << type;
    randomize(m, 7);
    sum_all(m.forward(from_ints({5, 3, 5, 9, 5, 1}, {2, 3}))).backward();
    const std::vector<double> g = table.grad().to_double_vector();
    for (int64_t j = 0; j < 16; ++j) {
      EXPECT_EQ(g[size_t(5 * 16 + j)], 0.0) << type << " pad row, column " << j;
      EXPECT_NE(g[size_t(3 * 16 + j)], 0.0) << type << " row 3, column " << j;
    }
  }
}

TEST(LlamaModel, Qwen2BiasesUntiedLinearRopeMaskMatchReference) {
  LlamaConfig c = small("qwen2", 40, 12, 20, 2, 3, 1);
  c.rope_theta = 1e6;
  c.rope_scaling = models::RopeScaling{.type = "linear", .factor = 2.0};
  Llama m(c, kF64);
  EXPECT_TRUE(m.find_module("model.layers.0.self_attn.q_proj")->named_parameters().size() == 2);  // weight, bias
  EXPECT_EQ(m.find_module("model.layers.0.self_attn.o_proj")->named_parameters().size(), 1u);
  randomize(m, 2);
  // Right padding: batch 1's last two tokens are padding.
  const Tensor mask = from_ints({1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0}, {2, 6}, DType::U8);
  expect_matches_reference(m, ids_of(2, 6, 40, 2), mask, 1e-6);
}

TEST(LlamaModel, HeadDimBiasesLlama3RopeMatchReference) {
  // head_dim 6 with hidden 8 (q is 12 wide); llama3 bands: kept, blended and divided frequencies.
  LlamaConfig c = small("llama", 30, 8, 10, 1, 2, 1);
  c.head_dim = 6;
  c.attention_bias = c.mlp_bias = true;
  c.rope_scaling = models::RopeScaling{"llama3", 4.0, 1.0, 4.0, 256};
  Llama m(c, kF64);
  EXPECT_EQ(m.parameter("model.layers.0.self_attn.q_proj.weight").shape(), Shape({12, 8}));
  EXPECT_EQ(m.parameter("model.layers.0.self_attn.o_proj.weight").shape(), Shape({8, 12}));
  EXPECT_FALSE(qkv_adjacent(m, 0));  // 768-byte q: not on a 512-byte boundary, so concatenated
  randomize(m, 3);
  expect_matches_reference(m, ids_of(3, 9, 30, 3), Tensor(), 1e-6);
}

TEST(LlamaModel, Qwen3HeadNormsHeadDimUntiedMaskMatchReference) {
  // head_dim 6 over width 8 (q 18 wide, not the width), q_norm / k_norm, attention_bias on q, k, v, o.
  LlamaConfig c = small("qwen3", 30, 8, 10, 2, 3, 1);
  c.head_dim = 6;
  c.rope_theta = 1e6;
  c.attention_bias = true;
  Llama m(c, kF64);
  EXPECT_EQ(m.parameter("model.layers.1.self_attn.q_norm.weight").shape(), Shape({6}));
  EXPECT_EQ(m.parameter("model.layers.1.self_attn.k_norm.weight").shape(), Shape({6}));
  EXPECT_EQ(m.find_module("model.layers.0.self_attn.o_proj")->named_parameters().size(), 2u);
  EXPECT_EQ(double(m.num_parameters()), c.num_parameters());
  randomize(m, 5);
  const Tensor mask = from_ints({1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0}, {2, 7}, DType::U8);
  expect_matches_reference(m, ids_of(2, 7, 30, 5), mask, 1e-6);
  c.attention_bias = false;
  c.tie_word_embeddings = true;
  Llama tied(c, kF64);
  EXPECT_EQ(tied.find_module("model.layers.0.self_attn.q_proj")->named_parameters().size(), 1u);
  randomize(tied, 6);
  expect_matches_reference(tied, ids_of(3, 5, 30, 6), Tensor(), 1e-6);
}

TEST(LlamaModel, SlidingWindowsMatchReference) {
  // Mistral: a window of 3 on every layer, T 7; Qwen3: use_sliding_window on layer 1 only.
  LlamaConfig c = small("mistral", 30, 8, 10, 2, 2, 1);
  c.sliding_window = 3;
  Llama m(c, kF64);
  randomize(m, 8);
  expect_matches_reference(m, ids_of(2, 7, 30, 8), Tensor(), 1e-6);
  // The window changes the logits (else this test could not fail).
  c.sliding_window = 0;
  Llama full(c, kF64);
  randomize(full, 8);
  NoGradGuard ng;
  EXPECT_NE(full.forward(ids_of(2, 7, 30, 8)).to_double_vector(), m.forward(ids_of(2, 7, 30, 8)).to_double_vector());
}

TEST(LlamaModel, Qwen3SlidingLayersMatchReference) {
  LlamaConfig c = small("qwen3", 30, 8, 10, 2, 2, 1);
  c.head_dim = 6;
  c.sliding_window = 2, c.use_sliding_window = true, c.max_window_layers = 1;
  EXPECT_EQ(c.window_of(0), 0);
  EXPECT_EQ(c.window_of(1), 2);
  Llama m(c, kF64);
  randomize(m, 9);
  expect_matches_reference(m, ids_of(2, 6, 30, 9), Tensor(), 1e-6);
}

TEST(LlamaModel, Qwen3Gradcheck) {
  LlamaConfig c = small("qwen3", 11, 8, 6, 1, 2, 1);
  c.head_dim = 4;
  Llama m(c, kF64);
  randomize(m, 7);
  const Tensor ids = ids_of(2, 4, 11, 7);
  EXPECT_TRUE(test::gradcheck([&](const std::vector<Tensor>&) { return m.forward(ids); }, m.parameters()));
}

TEST(LlamaModel, Gradcheck) {
  LlamaConfig c = small("llama", 11, 8, 6, 1, 2, 1);
  c.attention_bias = c.mlp_bias = true;
  c.rope_scaling = models::RopeScaling{"llama3", 4.0, 1.0, 4.0, 64};
  Llama m(c, kF64);
  randomize(m, 4);
  const Tensor ids = ids_of(2, 5, 11, 4), mask = from_ints({1, 1, 1, 1, 1, 1, 1, 1, 0, 0}, {2, 5}, DType::U8);
  EXPECT_TRUE(test::gradcheck([&](const std::vector<Tensor>&) { return m.forward(ids, mask); }, m.parameters()));
}

// transformers' named_parameters() of each preset (compared as a set: leantrain registers a
// layer's norms before its attention; the names and shapes are what checkpoints key on).
using Spec = std::map<std::string, Shape>;

Spec transformers_spec(int64_t V, int64_t C, int64_t F, int64_t L, int64_t H, int64_t K, int64_t D, bool tied,
                       bool qkv_bias, bool qk_norm = false) {
  Spec s{{"model.embed_tokens.weight", {V, C}}, {"model.norm.weight", {C}}};
  for (int64_t i = 0; i < L; ++i) {
    const std::string l = "model.layers." + std::to_string(i) + ".";
    s[l + "self_attn.q_proj.weight"] = {H * D, C};
    s[l + "self_attn.k_proj.weight"] = {K * D, C};
    s[l + "self_attn.v_proj.weight"] = {K * D, C};
    s[l + "self_attn.o_proj.weight"] = {C, H * D};
    if (qkv_bias) {
      s[l + "self_attn.q_proj.bias"] = {H * D};
      s[l + "self_attn.k_proj.bias"] = {K * D};
      s[l + "self_attn.v_proj.bias"] = {K * D};
    }
    if (qk_norm) s[l + "self_attn.q_norm.weight"] = s[l + "self_attn.k_norm.weight"] = {D};
    s[l + "mlp.gate_proj.weight"] = {F, C};
    s[l + "mlp.up_proj.weight"] = {F, C};
    s[l + "mlp.down_proj.weight"] = {C, F};
    s[l + "input_layernorm.weight"] = {C};
    s[l + "post_attention_layernorm.weight"] = {C};
  }
  if (!tied) s["lm_head.weight"] = {V, C};
  return s;
}

TEST(LlamaModel, PresetsMatchTransformers) {
  struct Want {
    const char* preset;
    Spec spec;
    int64_t parameters;  // as transformers counts them (tied embeddings once)
    const char* type;
  };
  const std::vector<Want> wants = {
      {"llama-tiny", transformers_spec(4096, 64, 176, 2, 4, 2, 16, true, false), 0, "LlamaForCausalLM"},
      {"smollm2-135m", transformers_spec(49152, 576, 1536, 30, 9, 3, 64, true, false), 134'515'008, "LlamaForCausalLM"},
      {"tinyllama-1.1b", transformers_spec(32000, 2048, 5632, 22, 32, 4, 64, false, false), 1'100'048'384,
       "LlamaForCausalLM"},
      {"llama3.2-1b", transformers_spec(128256, 2048, 8192, 16, 32, 8, 64, true, false), 1'235'814'400,
       "LlamaForCausalLM"},
      {"llama3-8b", transformers_spec(128256, 4096, 14336, 32, 32, 8, 128, false, false), 8'030'261'248,
       "LlamaForCausalLM"},
      {"qwen2-0.5b", transformers_spec(151936, 896, 4864, 24, 14, 2, 64, true, true), 494'032'768, "Qwen2ForCausalLM"},
      // Qwen3: head_dim 128 at every width (0.6B's q is 2048 wide over a width of 1024).
      {"qwen3-tiny", transformers_spec(4096, 32, 64, 2, 4, 2, 12, true, false, true), 0, "Qwen3ForCausalLM"},
      {"qwen3-0.6b", transformers_spec(151936, 1024, 3072, 28, 16, 8, 128, true, false, true), 596'049'920,
       "Qwen3ForCausalLM"},
      {"qwen3-1.7b", transformers_spec(151936, 2048, 6144, 28, 16, 8, 128, true, false, true), 1'720'574'976,
       "Qwen3ForCausalLM"},
      {"qwen3-4b", transformers_spec(151936, 2560, 9728, 36, 32, 8, 128, true, false, true), 4'022'468'096,
       "Qwen3ForCausalLM"},
      {"qwen3-8b", transformers_spec(151936, 4096, 12288, 36, 32, 8, 128, false, false, true), 8'190'735'360,
       "Qwen3ForCausalLM"},
  };
  for (const Want& w : wants) {
    auto m = models::create_model(w.preset, {.device = Device::meta()});
    Spec got;
    for (auto& [n, t] : m->named_parameters()) got[n] = t.shape();
    EXPECT_EQ(got, w.spec) << w.preset;
    if (w.parameters) EXPECT_EQ(m->num_parameters(), w.parameters) << w.preset;
    EXPECT_STREQ(m->type_name(), w.type);
  }
  auto q = models::create_model("qwen2-0.5b", {.device = Device::meta()});
  EXPECT_STREQ(q->find_module("model.layers.3")->type_name(), "Qwen2DecoderLayer");
  EXPECT_STREQ(q->find_module("model.layers.3.self_attn")->type_name(), "Qwen2Attention");
  EXPECT_STREQ(q->find_module("model.layers.3.mlp")->type_name(), "Qwen2MLP");
  EXPECT_STREQ(q->find_module("model.layers.3.input_layernorm")->type_name(), "RMSNorm");
  EXPECT_STREQ(q->find_module("model.rotary_emb")->type_name(), "Qwen2RotaryEmbedding");
  EXPECT_STREQ(q->find_module("model")->type_name(), "Qwen2Model");
  auto q3 = models::create_model("qwen3-0.6b", {.device = Device::meta()});
  EXPECT_STREQ(q3->find_module("model.layers.3.self_attn")->type_name(), "Qwen3Attention");
  EXPECT_EQ(q3->find_module("model.layers.3.self_attn.q_norm")->named_parameters().size(), 1u);
  // llama3.2-1b's RoPE is Llama 3's: the lowest frequency divided by the factor 32.
  auto l = models::create_model("llama3.2-1b", {.device = Device::meta()});
  auto* rotary = dynamic_cast<nn::RotaryEmbedding*>(l->find_module("model.rotary_emb"));
  ASSERT_NE(rotary, nullptr);
  EXPECT_NEAR(rotary->inv_freq().back(), rope_inv_freq(64, 500000.0).back() / 32.0f, 1e-12);
}

TEST(LlamaModel, InitFollowsTransformers) {
  LlamaConfig c = small("qwen2", 64, 32, 48, 1, 4, 2);
  c.initializer_range = 0.05;
  Llama m(c, {.seed = 5});
  for (auto& [n, p] : m.named_parameters()) {
    const std::vector<float> v = p.to_float_vector();
    if (n.find("norm") != std::string::npos) {
      EXPECT_TRUE(std::all_of(v.begin(), v.end(), [](float x) { return x == 1.0f; })) << n;
    } else if (n.find("bias") != std::string::npos) {
      EXPECT_TRUE(std::all_of(v.begin(), v.end(), [](float x) { return x == 0.0f; })) << n;
    } else {
      double s2 = 0;
      for (float x : v) s2 += double(x) * x;
      EXPECT_NEAR(std::sqrt(s2 / double(v.size())), 0.05, 0.012) << n;  // normal(initializer_range)
    }
  }
}

TEST(LlamaModel, CheckpointKeysAndNames) {
  LlamaConfig c = small("llama", 40, 16, 24, 1, 4, 2);
  c.tie_word_embeddings = true;
  Llama tied(c, {.device = Device::meta()});
  EXPECT_EQ(tied.checkpoint_key_to_name("lm_head.weight"), "");  // tied to model.embed_tokens.weight
  EXPECT_EQ(tied.checkpoint_key_to_name("model.layers.0.self_attn.rotary_emb.inv_freq"), "");
  EXPECT_EQ(tied.checkpoint_key_to_name("model.layers.0.mlp.up_proj.weight"), "model.layers.0.mlp.up_proj.weight");
  EXPECT_EQ(tied.checkpoint_key_to_name("layers.0.mlp.up_proj.weight"), "model.layers.0.mlp.up_proj.weight");
  EXPECT_EQ(tied.checkpoint_key_to_name("embed_tokens.weight"), "model.embed_tokens.weight");
  c.tie_word_embeddings = false;
  Llama untied(c, {.device = Device::meta()});
  EXPECT_EQ(untied.checkpoint_key_to_name("lm_head.weight"), "lm_head.weight");
  EXPECT_EQ(untied.named_parameters().back().first, "lm_head.weight");
  EXPECT_GT(tied.root_forward_flops({2, 8}), 0);
  EXPECT_EQ(untied.root_forward_flops({2, 8}), 0);
}

TEST(LlamaModel, CheckpointingSelectsDecoderLayersAndKeepsGradients) {
  LlamaConfig c = small("llama", 40, 16, 24, 3, 4, 2);
  auto grads = [&](const std::string& spec) {
    Llama m(c, {.seed = 6});
    const bool every_block = spec == "blocks" || spec == "selective";
    if (!spec.empty()) EXPECT_EQ(nn::apply_checkpointing(m, spec).size(), every_block ? 3u : 1u);
    m.loss(ids_of(2, 6, 40, 6), ids_of(2, 6, 40, 7)).backward();
    std::vector<float> g;
    for (auto& [n, p] : m.named_parameters())
      for (float v : p.grad().to_float_vector()) g.push_back(v);
    return g;
  };
  const std::vector<float> plain = grads("");
  for (const char* spec : {"blocks", "selective", "model\\.layers\\.1\\.mlp", "model\\.layers\\.0\\.self_attn\\.core"}) {
    const std::vector<float> g = grads(spec);
    ASSERT_EQ(g.size(), plain.size());
    for (size_t i = 0; i < g.size(); ++i) ASSERT_EQ(g[i], plain[i]) << spec << " [" << i << "]";
  }
  Llama m(c, {.device = Device::meta()});
  EXPECT_EQ(nn::select_checkpoint_modules(m, "blocks"),
            (std::vector<std::string>{"model.layers.0", "model.layers.1", "model.layers.2"}));
}

// A wrapped projection runs as its own module (three GEMMs): the same result as the one-GEMM path.
TEST(LlamaModel, WrappedProjectionsRunAsModules) {
  LlamaConfig c = small("qwen2", 40, 16, 24, 1, 4, 2);
  Llama m(c, kF64);
  randomize(m, 8);
  const Tensor ids = ids_of(2, 5, 40, 8);
  const std::vector<double> fused = m.forward(ids).to_double_vector();
  int calls = 0;
  for (const char* p : {"model.layers.0.self_attn.k_proj", "model.layers.0.mlp.up_proj"})
    m.find_module(p)->set_forward_wrapper([&](nn::Module&, const Tensor& x, const nn::Module::ForwardFn& f) {
      ++calls;
      return f(x);
    });
  const std::vector<double> split = m.forward(ids).to_double_vector();
  EXPECT_EQ(calls, 2);
  for (size_t i = 0; i < fused.size(); ++i) ASSERT_NEAR(split[i], fused[i], 1e-12) << i;
}

// What a layer keeps for the backward: the one-GEMM paths keep no more than their inputs, the
// rotated q | k | v, the attention output and the gate | up buffer; calling down_proj as a module
// (a wrapper on it) keeps its input, the F-wide activation, on top.
TEST(LlamaModel, KeepsTheActivationOutOfTheSavedTensors) {
  LlamaConfig c = small("llama", 64, 32, 96, 1, 4, 2);  // F = 96: the activation is 3 x 32 wide
  const int64_t B = 2, T = 16;
  auto kept_bytes = [&](bool wrap_down) {
    Llama m(c, {.seed = 11});
    if (wrap_down)
      m.find_module("model.layers.0.mlp.down_proj")
          ->set_forward_wrapper([](nn::Module&, const Tensor& x, const nn::Module::ForwardFn& f) { return f(x); });
    Allocator& al = allocator_for(Device::cpu());
    const Tensor ids = ids_of(B, T, 64, 11);
    const int64_t before = al.stats().allocated_bytes.current;
    Tensor loss = m.loss(ids, ids);
    return al.stats().allocated_bytes.current - before;
  };
  EXPECT_EQ(kept_bytes(true) - kept_bytes(false), B * T * 96 * 4);  // [B, T, F] f32
}

// One decoder layer keeps, over N = B T tokens (f32, every tensor a whole number of 512-byte
// granules here): its input and rstd (input_layernorm), the normed input (the q|k|v GEMM), the
// rotated q|k|v, out and lse (attention; o_proj keeps the same out), the residual sum and rstd
// (post_attention_layernorm), the normed sum (the gate|up GEMM) and gate|up (swiglu_linear).
// docs/memory-model.md has the table.
TEST(LlamaModel, OneLayerKeepsWhatTheMemoryModelSays) {
  const int64_t B = 2, T = 16, N = B * T, C = 32, H = 4, Hkv = 2, D = 8, F = 64, s = 4;
  auto kept_bytes = [&](int64_t layers) {
    Llama m(small("llama", 64, C, F, layers, H, Hkv), {.seed = 12});
    Allocator& al = allocator_for(Device::cpu());
    const Tensor ids = ids_of(B, T, 64, 12);
    const int64_t before = al.stats().allocated_bytes.current;
    Tensor loss = m.loss(ids, ids);
    return al.stats().allocated_bytes.current - before;
  };
  const int64_t rstd = 512;  // 4 N = 128 bytes, one granule
  const int64_t want = C * s * N + rstd + C * s * N + (H + 2 * Hkv) * D * s * N + H * D * s * N + 4 * H * N +
                       C * s * N + rstd + C * s * N + 2 * F * s * N;
  EXPECT_EQ(kept_bytes(2) - kept_bytes(1), want);
}

// RoPE is relative: the same tokens at positions 37.. attend as at 0..; an offset needs no-grad.
TEST(LlamaModel, PositionOffsetShiftsRopeOnly) {
  LlamaConfig c = small("llama", 40, 16, 24, 2, 4, 2);
  Llama m(c, kF64);
  randomize(m, 9);
  const Tensor ids = ids_of(1, 6, 40, 9);
  NoGradGuard ng;
  const std::vector<double> a = m.hidden_states(ids).to_double_vector(), b = m.hidden_states(ids, {}, 37).to_double_vector();
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5) << i;
  EXPECT_THROW(m.hidden_states(ids, {}, 60), Error);  // past max_position_embeddings = 64
  EnableGradGuard grad;
  EXPECT_THROW(m.hidden_states(ids, {}, 3), Error);
}

TEST(LlamaModel, GenerateAndTrain) {
  LlamaConfig c = small("llama", 64, 32, 64, 2, 4, 2);
  c.tie_word_embeddings = true;
  Llama m(c, {.seed = 10});
  auto a = m.generate({1, 2, 3}, 70, 1.0, 10, 7), b = m.generate({1, 2, 3}, 70, 1.0, 10, 7);
  ASSERT_EQ(a.size(), 73u);  // past max_position_embeddings = 64: the context is cropped
  EXPECT_EQ(a, b);
  for (int64_t t : a) EXPECT_TRUE(t >= 0 && t < 64);
  // Plain SGD on four sequences: the loss falls.
  const Tensor seq = ids_of(4, 17, 64, 10);
  const Tensor x = contiguous(slice(seq, 1, 0, 16)), y = contiguous(slice(seq, 1, 1, 17));
  std::vector<double> losses;
  for (int s = 0; s < 30; ++s) {
    zero_grad(m.parameters());
    Tensor loss = m.loss(x, y);
    losses.push_back(loss.item());
    loss.backward();
    NoGradGuard ng;
    for (Tensor& p : m.parameters()) add_(p, scale(p.grad(), -0.5));
  }
  EXPECT_NEAR(losses.front(), std::log(64.0), 0.2);
  EXPECT_LT((losses[27] + losses[28] + losses[29]) / 3, 0.85 * losses.front());
}

// The dry run on meta predicts a CPU run's peak to the byte, checkpointed or not, in f32 and
// under autocast (the one-GEMM views, the rope and swiglu ops allocate the same on every device).
TEST(LlamaModel, PlanEqualsTheCpuRunsPeak) {
  for (const char* checkpoint : {"none", "blocks", "selective"})
    for (const char* precision : {"32-true", "bf16-mixed"}) {
      RunConfig c;
      c.model = "llama-tiny";
      c.data = "synthetic";
      c.batch = 4;
      c.seq_len = 32;
      c.steps = 2;
      c.eval_batches = 1;
      c.device = "cpu";
      c.checkpoint = parse_checkpoint_flag(checkpoint);
      c.precision = *choice_named<Precision>(precision);
      PlanResult p = plan_run(c, PlanOptions{"cpu"});
      const int64_t before = allocator_for(Device::cpu()).stats().allocated_bytes.current;
      RunResult r = train(c);
      EXPECT_EQ(r.memory.allocated_bytes.peak - before, p.peak_allocated) << checkpoint << " " << precision;
    }
  // Qwen3's head norms (copies and concat) and Gemma 3's sandwich norms, GeGLU, scaled embedding:
  // the same exactness, checkpointed under autocast (Gemma's sequence within its window of 16).
  for (const char* model : {"qwen3-tiny", "gemma3-tiny"}) {
    RunConfig c;
    c.model = model;
    c.data = "synthetic";
    c.batch = 4;
    c.seq_len = 16;
    c.steps = 2;
    c.eval_batches = 1;
    c.device = "cpu";
    c.checkpoint = nn::CheckpointSpec::blocks();
    c.precision = Precision::MixedBf16;
    PlanResult p = plan_run(c, PlanOptions{"cpu"});
    const int64_t before = allocator_for(Device::cpu()).stats().allocated_bytes.current;
    RunResult r = train(c);
    EXPECT_EQ(r.memory.allocated_bytes.peak - before, p.peak_allocated) << model;
  }
}

}  // namespace
