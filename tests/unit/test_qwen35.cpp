// Qwen3.5 text (models/qwen3_5.h) on the CPU: config.json in (qwen3_5_text, a qwen3_5 checkpoint's
// text_config, layer_types or full_attention_interval, rope_parameters with partial_rotary_factor)
// and out, the refusals (one line each), the presets' shapes and sizes; logits and every gradient
// against a reference written with plain ops in f64 (Gated DeltaNet token by token, gated attention
// with (1 + w) q/k norms and partial rotary, (1 + w) RMSNorms, SwiGLU), a gradcheck, the key names
// of a multimodal checkpoint (vision tower and MTP layers skipped), LoRA on every linear with
// transformers' names, and a short training run. Packed documents (doc_pos): a row of several
// documents gives each document's logits and every gradient as the document alone does (f64 and
// qwen3.5-tiny in f32, documents shorter than the convolution and across the delta rule's chunks);
// key padding before or after the real tokens changes nothing for them, and a mask that cannot be
// honoured is refused in one line.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "leantrain/autograd.h"
#include "leantrain/checkpoint.h"
#include "leantrain/cuda_info.h"
#include "leantrain/plan.h"
#include "leantrain/train.h"
#include "leantrain/nn_lora.h"
#include "leantrain/optim.h"
#include "leantrain/random.h"
#include "models/qwen3_5.h"
#include "models/registry.h"
#include "train/recipe_table.h"
#include "unit/delta_reference.h"
#include "unit/error_of.h"
#include "unit/gradcheck.h"
#include "unit/rel_error.h"

using namespace lt;
using models::Qwen35;
using models::Qwen35Config;
using lt::test::error_of;
using namespace lt::test::delta_ref;

namespace {

Qwen35Config parse(const std::string& text) { return Qwen35Config::from_json(nlohmann::json::parse(text)); }

void expect_refused(const std::string& text, const std::string& fragment) {
  const std::string m = error_of([&] { models::config_from_json(text); });
  EXPECT_NE(m.find(fragment), std::string::npos) << text << "\n -> " << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

// Qwen/Qwen3.5-0.8B's config.json (a qwen3_5 checkpoint: the text tower under text_config).
const char* kQwen35_08b = R"({"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
  "image_token_id": 248056, "video_token_id": 248057, "vision_start_token_id": 248053, "vision_end_token_id": 248054,
  "tie_word_embeddings": true,
  "text_config": {"model_type": "qwen3_5_text", "vocab_size": 248320, "hidden_size": 1024, "intermediate_size": 3584,
    "num_hidden_layers": 24, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 256,
    "attention_bias": false, "attn_output_gate": true, "linear_num_key_heads": 16, "linear_num_value_heads": 16,
    "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "rms_norm_eps": 1e-06,
    "full_attention_interval": 4, "max_position_embeddings": 262144, "tie_word_embeddings": true,
    "mtp_num_hidden_layers": 1, "mtp_use_dedicated_embeddings": false, "hidden_act": "silu",
    "mamba_ssm_dtype": "float32", "eos_token_id": 248044, "dtype": "bfloat16",
    "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention",
      "linear_attention", "linear_attention", "linear_attention", "full_attention",
      "linear_attention", "linear_attention", "linear_attention", "full_attention",
      "linear_attention", "linear_attention", "linear_attention", "full_attention",
      "linear_attention", "linear_attention", "linear_attention", "full_attention",
      "linear_attention", "linear_attention", "linear_attention", "full_attention"],
    "rope_parameters": {"mrope_interleaved": true, "mrope_section": [11, 11, 10], "rope_type": "default",
      "rope_theta": 10000000, "partial_rotary_factor": 0.25}},
  "vision_config": {"depth": 12, "hidden_size": 768, "model_type": "qwen3_5_vision"}})";

}  // namespace

TEST(Qwen35Config, ReadsTheRealConfigAndRoundTrips) {
  Qwen35Config c = Qwen35Config::from_json(nlohmann::json::parse(kQwen35_08b));
  EXPECT_EQ(c.hidden_size, 1024);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.linear_num_value_heads, 16);
  EXPECT_EQ(c.rope_theta, 1e7);
  EXPECT_EQ(c.rotary_dim(), 64);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.mtp_num_hidden_layers, 1);
  for (int64_t i = 0; i < 24; ++i) EXPECT_EQ(c.is_full(i), (i + 1) % 4 == 0) << i;
  EXPECT_EQ(parse(c.to_json()).to_json(), c.to_json());
  const nlohmann::json j = nlohmann::json::parse(c.to_json());
  EXPECT_EQ(j["model_type"], "qwen3_5_text");
  EXPECT_EQ(j["architectures"], nlohmann::json({"Qwen3_5ForCausalLM"}));
  EXPECT_EQ(j["rope_parameters"]["mrope_section"], nlohmann::json({11, 11, 10}));
  EXPECT_EQ(j["rope_parameters"]["partial_rotary_factor"], 0.25);
  EXPECT_EQ(j["layer_types"][3], "full_attention");
  EXPECT_EQ(j["eos_token_id"], 248044);
  EXPECT_EQ(&models::config_from_json(c.to_json())->family(), &models::family_of_type("qwen3_5_text"));
  // The preset is this file (and the family reads the multimodal config too).
  EXPECT_EQ(Qwen35Config::preset("qwen3.5-0.8b").to_json(), c.to_json());
  EXPECT_EQ(models::config_from_json(kQwen35_08b)->to_json(), c.to_json());

  // Without layer_types: every full_attention_interval-th layer; the older top-level rope keys.
  Qwen35Config t = parse(R"({"model_type": "qwen3_5_text", "num_hidden_layers": 6, "full_attention_interval": 3,
    "rope_theta": 5000.0, "partial_rotary_factor": 0.5, "head_dim": 64})");
  EXPECT_TRUE(!t.is_full(0) && !t.is_full(1) && t.is_full(2) && t.is_full(5));
  EXPECT_EQ(t.rope_theta, 5000.0);
  EXPECT_EQ(t.rotary_dim(), 32);
  EXPECT_FALSE(t.tie_word_embeddings);  // Qwen3_5TextConfig's default
}

// pad_token_id is embed_tokens' padding_idx (transformers: nn.Embedding(..., config.pad_token_id)),
// none by default; the pad row starts at zero and its lookups add no gradient to the table.
TEST(Qwen35Config, PadTokenIdIsThePaddingIndex) {
  const std::string h = R"({"model_type": "qwen3_5_text", "vocab_size": 300, )";
  EXPECT_EQ(parse(h + R"("hidden_size": 64})").padding_idx(), -1);
  EXPECT_EQ(parse(h + R"("pad_token_id": 7})").padding_idx(), 7);
  EXPECT_EQ(parse(h + R"("pad_token_id": -1})").padding_idx(), 299);
  EXPECT_EQ(parse(h + R"("pad_token_id": null})").padding_idx(), -1);
  expect_refused(h + R"("pad_token_id": 300})", "'pad_token_id' = 300");
}

TEST(Qwen35Config, RefusalsAreOneLine) {
  const std::string h = R"({"model_type": "qwen3_5_text", "hidden_size": 32, "num_attention_heads": 2,
    "num_key_value_heads": 1, "head_dim": 16, "num_hidden_layers": 2, "vocab_size": 300, "linear_num_key_heads": 2,
    "linear_num_value_heads": 4, "linear_key_head_dim": 8, "linear_value_head_dim": 8, )";
  expect_refused(h + R"("attention_bias": true})", "'attention_bias' is true");
  expect_refused(h + R"("attn_output_gate": false})", "'attn_output_gate' is false");
  expect_refused(h + R"("hidden_act": "gelu"})", "hidden_act 'gelu' is not supported");
  expect_refused(h + R"("layer_types": ["full_attention"]})", "layer_types has 1 entries for 2 layers");
  expect_refused(h + R"("layer_types": ["full_attention", "sliding_attention"]})", "layer_types entry \"sliding_attention\"");
  expect_refused(h + R"("linear_num_value_heads": 3})", "linear_num_value_heads 3 is not divisible");
  expect_refused(h + R"("linear_key_head_dim": 512})", "linear key/value head dims 512");
  expect_refused(h + R"("rope_parameters": {"rope_type": "yarn", "factor": 2.0}})", "rope_type 'yarn' is not supported");
  expect_refused(h + R"("partial_rotary_factor": 0.01})", "partial_rotary_factor");
  expect_refused(h + R"("mamba_ssm_dtype": "bfloat16"})", "mamba_ssm_dtype 'bfloat16'");
  expect_refused(h + R"("eos_token_id": 300})", "'eos_token_id' = 300");
  expect_refused(R"({"model_type": "qwen3_5", "text_config": 5})", "qwen3_5 'text_config' is 5");
}

TEST(Qwen35Config, PresetsHaveThePublishedShapes) {
  // Parameter counts of the text towers in closed form (no MTP layer): Qwen3.5-0.8B and -2B tied.
  EXPECT_EQ(Qwen35Config::preset("qwen3.5-2b").num_parameters(), 1'881'825'088.0);
  for (const std::string& p : Qwen35Config::preset_names()) {
    SCOPED_TRACE(p);
    Qwen35Config c = Qwen35Config::preset(p);
    EXPECT_NO_THROW(c.validate());
    EXPECT_EQ(parse(c.to_json()).to_json(), c.to_json());
    EXPECT_EQ(models::family_of_preset(p), &models::family_of_type("qwen3_5_text"));
  }
  // The acceptance shape of issue 44: hidden 2048, 24 layers, intermediate 6144, 8 q / 2 kv heads
  // of 256, DeltaNet 16 / 16 heads of 128, vocab 248,320, tied.
  Qwen35Config c = Qwen35Config::preset("qwen3.5-2b");
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.num_hidden_layers, 24);
  EXPECT_EQ(c.intermediate_size, 6144);
  EXPECT_EQ(c.linear_num_key_heads * c.linear_key_head_dim, 2048);
  EXPECT_TRUE(c.tie_word_embeddings);
}

namespace {

// Every parameter redrawn, so a wrong norm, gate or head shows.
void randomize(Qwen35& m, uint64_t seed) {
  Generator gen(seed);
  NoGradGuard ng;
  for (auto& [n, p] : m.named_parameters()) {
    Tensor r = randn(p.shape(), gen, 0.3f, p.dtype());
    if (n.ends_with("A_log")) r = scale(r, 1.0);  // any log decay rate
    if (n.ends_with("linear_attn.norm.weight") || n.ends_with("dt_bias")) r = add_scalar(r, 1.0);
    copy_(p, r);
  }
}

Tensor ids_of(int64_t B, int64_t T, int64_t V, uint64_t seed) {
  std::vector<int64_t> v(size_t(B * T));
  for (size_t i = 0; i < v.size(); ++i) v[i] = int64_t(rng_mix64(seed * 7919 + i) % uint64_t(V));
  return from_ints(v, {B, T});
}

Qwen35Config small(int64_t layers, bool tied) {
  Qwen35Config c;
  c.vocab_size = 37, c.hidden_size = 12, c.intermediate_size = 20, c.num_hidden_layers = layers;
  c.num_attention_heads = 2, c.num_key_value_heads = 1, c.head_dim = 8, c.partial_rotary_factor = 0.5;
  c.linear_num_key_heads = 1, c.linear_key_head_dim = 5, c.linear_num_value_heads = 2, c.linear_value_head_dim = 3;
  c.linear_conv_kernel_dim = 3, c.max_position_embeddings = 64, c.rope_theta = 1e4, c.full_attention_interval = 2;
  c.tie_word_embeddings = tied;
  return c;
}

// transformers' Qwen3_5ForCausalLM forward, op by op, in f64 on the model's parameters.
Tensor reference_logits(const Qwen35& m, const Tensor& ids, const Tensor& mask) {
  const Qwen35Config& c = m.config();
  const int64_t B = ids.size(0), T = ids.size(1), H = c.num_attention_heads, K = c.num_key_value_heads, D = c.head_dim;
  const int64_t R = c.rotary_dim();
  std::map<std::string, Tensor> p;
  for (auto& [n, t] : m.named_parameters()) p[n] = t;
  // The norms' eps and the delta rule's Dk^-1/2 as the kernels take them: f32 constants (as torch
  // multiplies an f32 tensor by a Python float); everything else in f64.
  const double eps = double(float(c.rms_norm_eps));
  auto norm = [&](const Tensor& x, const std::string& n) {  // Qwen3_5RMSNorm: x rsqrt(mean x^2 + eps) (1 + w)
    // sum / C, not mean(): mean scales by an f32 1/C
    Tensor ms = div(sum(mul(x, x), {-1}, true), full({1}, double(x.size(-1)), DType::F64));
    return mul(div(x, sqrt(add_scalar(ms, eps))), add_scalar(p[n], 1.0));
  };
  // Partial rotary: the first R dims of each head turn (rotate-half within them), the rest pass. The
  // angles as transformers computes them in f32 (inv_freq in f32, times the position in f32, cos and
  // sin of that rounded to f32), so the comparison below can be tight.
  const std::vector<float> inv = rope_inv_freq(R, c.rope_theta);
  std::vector<double> cv, sv;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < R; ++j) {
      const float a = inv[size_t(j % (R / 2))] * float(t);
      cv.push_back(double(float(std::cos(double(a))))), sv.push_back(double(float(std::sin(double(a)))));
    }
  const Tensor cos = from_vector(cv, {1, 1, T, R}), sin = from_vector(sv, {1, 1, T, R});
  auto rope = [&](const Tensor& y) {
    Tensor r = slice(y, 3, 0, R), pass = slice(y, 3, R, D);
    Tensor rot = concat({neg(slice(r, 3, R / 2, R)), slice(r, 3, 0, R / 2)}, 3);
    return concat({add(mul(r, cos), mul(rot, sin)), pass}, 3);
  };
  auto heads = [&](const Tensor& y, int64_t n) { return permute(reshape(y, {B, T, n, D}), {0, 2, 1, 3}); };
  auto repeat_kv = [&](const Tensor& kv) {
    return reshape(contiguous(expand(reshape(contiguous(kv), {B, K, 1, T, D}), {B, K, H / K, T, D})), {B, H, T, D});
  };
  Tensor keep = mask.defined() ? reshape(cast(mask, DType::F64), {B, T, 1}) : Tensor();
  Tensor x = embedding(ids, p["model.embed_tokens.weight"]);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string f = "model.layers." + std::to_string(l) + ".";
    Tensor h = norm(x, f + "input_layernorm.weight"), o;
    if (c.is_full(l)) {
      const std::string a = f + "self_attn.";
      Tensor qg = reshape(linear(h, p[a + "q_proj.weight"], Tensor()), {B, T, H, 2 * D});
      Tensor q = permute(slice(qg, 3, 0, D), {0, 2, 1, 3});
      Tensor gate = reshape(slice(qg, 3, D, 2 * D), {B, T, H * D});
      q = rope(norm(q, a + "q_norm.weight"));
      Tensor k = rope(norm(heads(linear(h, p[a + "k_proj.weight"], Tensor()), K), a + "k_norm.weight"));
      Tensor v = heads(linear(h, p[a + "v_proj.weight"], Tensor()), K);
      Tensor at = scaled_dot_product_attention(q, repeat_kv(k), repeat_kv(v), AttentionMask{true, mask, 0, Tensor()},
                                               1.0 / std::sqrt(double(D)));
      at = reshape(contiguous(permute(at, {0, 2, 1, 3})), {B, T, H * D});
      o = linear(mul(at, sigmoid(gate)), p[a + "o_proj.weight"], Tensor());
    } else {
      const std::string a = f + "linear_attn.";
      const int64_t Hk = c.linear_num_key_heads, Dk = c.linear_key_head_dim, Hv = c.linear_num_value_heads,
                    Dv = c.linear_value_head_dim;
      Tensor hin = keep.defined() ? mul(h, keep) : h;
      Tensor qkv = linear(hin, p[a + "in_proj_qkv.weight"], Tensor());
      Tensor z = linear(hin, p[a + "in_proj_z.weight"], Tensor());
      Tensor bb = linear(hin, p[a + "in_proj_b.weight"], Tensor()), aa = linear(hin, p[a + "in_proj_a.weight"], Tensor());
      Tensor w = p[a + "conv1d.weight"];
      Tensor conv = naive_conv(qkv, reshape(w, {w.size(0), w.size(2)}), true);
      Tensor q = reshape(slice(conv, 2, 0, Hk * Dk), {B, T, Hk, Dk});
      Tensor k = reshape(slice(conv, 2, Hk * Dk, 2 * Hk * Dk), {B, T, Hk, Dk});
      Tensor v = reshape(slice(conv, 2, 2 * Hk * Dk, 2 * Hk * Dk + Hv * Dv), {B, T, Hv, Dv});
      Tensor g = naive_decay(aa, p[a + "A_log"], p[a + "dt_bias"]);
      Tensor d = naive_delta_rule(q, k, v, g, sigmoid(bb), double(float(1.0 / std::sqrt(double(Dk)))));
      Tensor y = naive_gated_norm(reshape(d, {B, T, Hv * Dv}), z, p[a + "norm.weight"], eps);
      o = linear(y, p[a + "out_proj.weight"], Tensor());
    }
    x = add(x, o);
    h = norm(x, f + "post_attention_layernorm.weight");
    Tensor act = mul(silu(linear(h, p[f + "mlp.gate_proj.weight"], Tensor())), linear(h, p[f + "mlp.up_proj.weight"], Tensor()));
    x = add(x, linear(act, p[f + "mlp.down_proj.weight"], Tensor()));
  }
  x = norm(x, "model.norm.weight");
  return linear(x, c.tie_word_embeddings ? p["model.embed_tokens.weight"] : p["lm_head.weight"], Tensor());
}

void expect_matches_reference(Qwen35& m, const Tensor& ids, const Tensor& mask) {
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
    for (size_t i = 0; i < w.size(); ++i) ASSERT_NEAR(g[i], w[i], 1e-10 * s) << name << " [" << i << "]";
  }
}

const nn::InitOptions kF64{.dtype = DType::F64, .seed = 3};

}  // namespace

TEST(Qwen35Model, MatchesTheReferenceTiedAndUntied) {
  Qwen35Config c = small(2, true);  // layer 0 Gated DeltaNet, layer 1 gated attention
  Qwen35 m(c, kF64);
  EXPECT_EQ(double(m.num_parameters()), c.num_parameters());
  EXPECT_EQ(m.parameter("model.layers.1.self_attn.q_proj.weight").shape(), Shape({32, 12}));  // q and gate
  EXPECT_EQ(m.parameter("model.layers.1.self_attn.q_norm.weight").shape(), Shape({8}));
  EXPECT_EQ(m.parameter("model.layers.0.linear_attn.in_proj_qkv.weight").shape(), Shape({16, 12}));
  EXPECT_EQ(m.parameter("model.layers.0.linear_attn.in_proj_z.weight").shape(), Shape({6, 12}));
  EXPECT_EQ(m.parameter("model.layers.0.linear_attn.in_proj_b.weight").shape(), Shape({2, 12}));
  EXPECT_EQ(m.parameter("model.layers.0.linear_attn.in_proj_a.weight").shape(), Shape({2, 12}));
  EXPECT_EQ(m.parameter("model.layers.0.linear_attn.conv1d.weight").shape(), Shape({16, 1, 3}));
  EXPECT_EQ(m.parameter("model.layers.0.linear_attn.A_log").shape(), Shape({2}));
  EXPECT_EQ(m.parameter("model.layers.0.linear_attn.dt_bias").shape(), Shape({2}));
  EXPECT_EQ(m.parameter("model.layers.0.linear_attn.norm.weight").shape(), Shape({3}));
  EXPECT_EQ(m.parameter("model.layers.0.linear_attn.out_proj.weight").shape(), Shape({12, 6}));
  for (auto& [n, p] : m.named_parameters())  // (1 + w) norms start at w = 0; the gated norm at 1
    if (n.find("layernorm") != std::string::npos || n.ends_with("q_norm.weight") || n == "model.norm.weight")
      EXPECT_EQ(p.to_double_vector()[0], 0.0) << n;
  EXPECT_EQ(m.parameter("model.layers.0.linear_attn.norm.weight").to_double_vector()[0], 1.0);
  randomize(m, 1);
  expect_matches_reference(m, ids_of(2, 7, 37, 1), Tensor());
  // A padded batch: the DeltaNet zeroes the padded inputs, the attention masks the padded keys.
  const Tensor mask = from_ints({1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0}, {2, 7}, DType::U8);
  expect_matches_reference(m, ids_of(2, 7, 37, 1), mask);
  c = small(4, false);
  c.full = {true, false, false, true};  // layer_types: both kinds at both ends
  c.linear_num_key_heads = 2, c.linear_num_value_heads = 2;
  Qwen35 u(c, kF64);
  randomize(u, 2);
  expect_matches_reference(u, ids_of(3, 5, 37, 2), Tensor());
  EXPECT_GT(u.loss(ids_of(3, 5, 37, 2), ids_of(3, 5, 37, 3)).item(), 0.0);
}

TEST(Qwen35Model, LongerThanAChunk) {
  // T 70: a chunk of 64 and one of 6 in the DeltaNet layer.
  Qwen35Config c = small(2, true);
  c.max_position_embeddings = 128;
  Qwen35 m(c, kF64);
  randomize(m, 6);
  expect_matches_reference(m, ids_of(1, 70, 37, 6), Tensor());
}

TEST(Qwen35Model, Gradcheck) {
  Qwen35Config c = small(2, true);
  c.vocab_size = 9, c.hidden_size = 8, c.intermediate_size = 6, c.head_dim = 4, c.partial_rotary_factor = 0.5;
  c.linear_key_head_dim = 3, c.linear_value_head_dim = 2;
  Qwen35 m(c, kF64);
  randomize(m, 4);
  const Tensor ids = ids_of(2, 4, 9, 4);
  EXPECT_TRUE(test::gradcheck([&](const std::vector<Tensor>&) { return m.forward(ids); }, m.parameters()));
}

TEST(Qwen35Model, CheckpointKeys) {
  Qwen35 m(small(2, true), nn::InitOptions{});
  // Qwen3_5ForConditionalGeneration (transformers 5): the text tower under model.language_model.
  EXPECT_EQ(m.checkpoint_key_to_name("model.language_model.layers.0.linear_attn.A_log"),
            "model.layers.0.linear_attn.A_log");
  EXPECT_EQ(m.checkpoint_key_to_name("model.language_model.embed_tokens.weight"), "model.embed_tokens.weight");
  EXPECT_EQ(m.checkpoint_key_to_name("model.visual.blocks.0.attn.qkv.weight"), "");
  EXPECT_EQ(m.checkpoint_key_to_name("mtp.layers.0.self_attn.q_proj.weight"), "");
  EXPECT_EQ(m.checkpoint_key_to_name("mtp.fc.weight"), "");
  EXPECT_EQ(m.checkpoint_key_to_name("lm_head.weight"), "");  // tied
  EXPECT_EQ(m.checkpoint_key_to_name("layers.1.self_attn.q_proj.weight"), "model.layers.1.self_attn.q_proj.weight");
  EXPECT_EQ(m.checkpoint_key_to_name("model.rotary_emb.inv_freq"), "");
}

TEST(Qwen35Model, LoraAdaptsEveryLinearWithTransformersNames) {
  Qwen35 m(small(2, true), nn::InitOptions{});
  std::vector<std::string> linears;
  for (auto& [path, mod] : m.named_modules())
    if (nn::linear_shape(*mod) && path.find("layers.") != std::string::npos) linears.push_back(path);
  const std::vector<std::string> want = {
      "model.layers.0.linear_attn.in_proj_qkv", "model.layers.0.linear_attn.in_proj_z",
      "model.layers.0.linear_attn.in_proj_b",   "model.layers.0.linear_attn.in_proj_a",
      "model.layers.0.linear_attn.out_proj",    "model.layers.0.mlp.gate_proj",
      "model.layers.0.mlp.up_proj",             "model.layers.0.mlp.down_proj",
      "model.layers.1.self_attn.q_proj",        "model.layers.1.self_attn.k_proj",
      "model.layers.1.self_attn.v_proj",        "model.layers.1.self_attn.o_proj",
      "model.layers.1.mlp.gate_proj",           "model.layers.1.mlp.up_proj",
      "model.layers.1.mlp.down_proj"};
  EXPECT_EQ(linears, want);
  EXPECT_EQ(m.find_module("model.layers.0.linear_attn.conv1d")->type_name(), std::string("Conv1d"));
  EXPECT_FALSE(nn::linear_shape(*m.find_module("model.layers.0.linear_attn.conv1d")));
}

TEST(Qwen35Model, LoraOnTheDeltaNetProjectionsKeepsTheFusedBaGemm) {
  // With adapters on in_proj_b and in_proj_a the b | a GEMM still runs once and the updates add
  // on: the logits equal the unfused path (adapters called one by one) with B made non-zero.
  Qwen35Config c = small(2, true);
  Qwen35 m(c, kF64);
  randomize(m, 8);
  const Tensor ids = ids_of(2, 6, 37, 8);
  Tensor before;
  {
    NoGradGuard ng;
    before = m.forward(ids);
  }
  nn::ParamFactory pf(nn::InitOptions{.dtype = DType::F64, .seed = 9});
  for (const char* name : {"in_proj_b", "in_proj_a", "in_proj_qkv", "out_proj"}) {
    const std::string path = std::string("model.layers.0.linear_attn.") + name;
    auto* owner = m.find_module("model.layers.0.linear_attn");
    std::shared_ptr<nn::UnaryModule> base;
    for (auto& [n, ch] : owner->children())
      if (n == name) base = std::dynamic_pointer_cast<nn::UnaryModule>(ch);
    m.replace_module(path, std::make_shared<nn::LoraLinear>(base, nn::LoraOptions{2, 4.0, 0.0}, pf));
  }
  pf.materialize();
  NoGradGuard ng;
  EXPECT_EQ(m.forward(ids).to_double_vector(), before.to_double_vector());  // B starts at zero
}

TEST(Qwen35Model, PadRowStartsAtZeroAndGetsNoLookupGradient) {
  Qwen35Config c = small(2, false);
  c.kept["pad_token_id"] = 3;
  Qwen35 m(c, kF64);
  const Tensor table = m.parameter("model.embed_tokens.weight");
  const int64_t C = c.hidden_size;
  const std::vector<double> w = table.to_double_vector();
  for (int64_t j = 0; j < C; ++j) ASSERT_EQ(w[3 * C + j], 0.0);
  double other = 0;
  for (int64_t j = 0; j < C; ++j) other += std::abs(w[4 * C + j]);
  EXPECT_GT(other, 0.0);  // only the pad row
  m.loss(from_ints({3, 4, 3, 9, 3, 2}, {2, 3}), from_ints({4, 3, 9, 3, 2, 1}, {2, 3})).backward();
  const std::vector<double> g = table.grad().to_double_vector();
  for (int64_t j = 0; j < C; ++j) ASSERT_EQ(g[3 * C + j], 0.0);  // untied: the table's only use is the lookup
  double gsum = 0;
  for (int64_t j = 0; j < C; ++j) gsum += std::abs(g[4 * C + j]);
  EXPECT_GT(gsum, 0.0);
}

TEST(Qwen35Model, TrainsOnTheCpu) {
  // The preset qwen3.5-tiny (three DeltaNet layers and one attention layer) learns a repeated batch.
  auto cfg = models::config_from_preset("qwen3.5-tiny");
  auto model = std::dynamic_pointer_cast<Qwen35>(cfg->build(nn::InitOptions{.seed = 1}));
  ASSERT_TRUE(model);
  const Tensor ids = ids_of(2, 40, 4096, 11), targets = ids_of(2, 40, 4096, 12);
  AdamW opt(model->named_trainable_parameters(), AdamWOptions{.lr = 3e-3});
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    opt.zero_grad();
    Tensor loss = model->loss(ids, targets);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item();
  }
  EXPECT_LT(last, first - 1.0) << first << " -> " << last;
}

// The plan equals the CPU run's peak to the byte with the Gated DeltaNet's chunked op (T 80: a chunk
// of 64 and one of 16), checkpointed or not, under autocast, with LoRA on every linear, with NF4 base
// weights, and with the optimizer state offloaded.
TEST(Qwen35Model, PlanEqualsTheCpuRunsPeak) {
  struct Case {
    const char* checkpoint;
    Precision precision;
    int64_t lora;
    QuantizeKind quantize;
    OffloadKind offload;
  };
  const std::vector<Case> cases = {
      {"none", Precision::True32, 0, QuantizeKind::None, OffloadKind::None},
      {"blocks", Precision::MixedBf16, 0, QuantizeKind::None, OffloadKind::None},
      {"selective", Precision::True32, 0, QuantizeKind::None, OffloadKind::None},
      {"blocks", Precision::TrueBf16, 4, QuantizeKind::None, OffloadKind::None},
      {"blocks", Precision::TrueBf16, 4, QuantizeKind::Nf4, OffloadKind::None},
      {"none", Precision::True32, 0, QuantizeKind::None, OffloadKind::Optimizer},
  };
  for (const Case& k : cases) {
    RunConfig c;
    c.model = "qwen3.5-tiny";
    c.data = "synthetic";
    c.batch = 2;
    c.seq_len = 80;
    c.steps = 2;
    c.eval_batches = 1;
    c.device = "cpu";
    c.checkpoint = parse_checkpoint_flag(k.checkpoint);
    c.precision = k.precision;
    c.lora_rank = k.lora;
    c.quantize = k.quantize;
    c.offload = k.offload;
    SCOPED_TRACE(std::string(k.checkpoint) + " lora " + std::to_string(k.lora) + " nf4 " +
                 std::to_string(k.quantize == QuantizeKind::Nf4) + " offload " +
                 std::to_string(k.offload == OffloadKind::Optimizer));
    PlanResult p = plan_run(c, PlanOptions{"cpu"});
    const int64_t before = allocator_for(Device::cpu()).stats().allocated_bytes.current;
    RunResult r = train(c);
    EXPECT_EQ(r.memory.allocated_bytes.peak - before, p.peak_allocated);
    EXPECT_TRUE(std::isfinite(r.final_loss));
  }
}

namespace {

// Rows of documents: each row's document lengths, in order.
using Docs = std::vector<std::vector<int64_t>>;

Tensor doc_positions(const Docs& rows, Device dev = Device::cpu()) {
  std::vector<int64_t> v;
  for (const auto& row : rows)
    for (int64_t n : row)
      for (int64_t i = 0; i < n; ++i) v.push_back(i);
  const int64_t B = int64_t(rows.size());
  return from_ints(v, {B, int64_t(v.size()) / B}, DType::I32, dev);
}

// The logits and every parameter's gradient of sum(logits * r).
struct Outputs {
  std::vector<double> logits;
  std::map<std::string, std::vector<double>> grads;
};

Outputs outputs_of(Qwen35& m, const std::function<Tensor()>& forward, const Tensor& r) {
  zero_grad(m.parameters());
  Tensor logits = forward();
  sum_all(mul(logits, r)).backward();
  Outputs o{logits.to_double_vector(), {}};
  for (auto& [n, p] : m.named_parameters()) o.grads[n] = p.grad().to_double_vector();
  return o;
}

// The packed rows (one forward under doc_pos) against each document run alone ([1, n] each, the
// logits put back in place): the logits and every gradient to `tol` (relative, per tensor), on
// the model's device. Returns the packed run's.
Outputs expect_documents_apart(Qwen35& m, const Tensor& ids_in, const Docs& rows, double tol) {
  const DType dt = m.parameters().front().dtype();
  const Device dev = m.device();
  const Tensor ids = ids_in.to(dev);
  Generator gen(17);
  const Tensor r = randn({ids.size(0), ids.size(1), m.config().vocab_size}, gen, 1.0f, dt, dev);
  const Tensor dp = doc_positions(rows, dev);
  const Outputs packed = outputs_of(m, [&] { return m.forward(ids, nn::TokenMask::documents(dp)); }, r);
  const Outputs alone = outputs_of(
      m,
      [&] {
        std::vector<Tensor> out_rows;
        for (size_t b = 0; b < rows.size(); ++b) {
          std::vector<Tensor> docs;
          int64_t at = 0;
          for (int64_t n : rows[b]) {
            docs.push_back(m.forward(slice(slice(ids, 0, int64_t(b), int64_t(b) + 1), 1, at, at + n)));
            at += n;
          }
          out_rows.push_back(concat(docs, 1));
        }
        return concat(out_rows, 0);
      },
      r);
  EXPECT_LT(test::rel_error(packed.logits, alone.logits), tol) << "logits";
  // The decay parameters' gradients (A_log, dt_bias) sum a term of every token through the chunked
  // solve: in f32 their rounding depends on where the chunks fall and on the compiler's
  // contractions (3e-5 under CI's clang build, 1.3e-4 to 1.4e-4 under gcc -O3), so 10 tol there.
  for (const auto& [name, g] : alone.grads) {
    const bool decay = name.ends_with("A_log") || name.ends_with("dt_bias");
    EXPECT_LT(test::rel_error(packed.grads.at(name), g), decay ? 10 * tol : tol) << name;
  }
  // Not vacuous: the same rows without doc_pos (documents attending to each other) differ.
  NoGradGuard ng;
  EXPECT_GT(test::rel_error(m.forward(ids).to_double_vector(), alone.logits), 100 * tol);
  return packed;
}

}  // namespace

TEST(Qwen35Model, PackedDocumentsEqualEachDocumentAlone) {
  // The small f64 model (a DeltaNet layer of 2 value heads on 1 key head, a 3-tap convolution, then
  // gated attention with partial rotary), its parameters redrawn. Rows of 150 put documents across
  // the delta rule's chunks of 64 (rows 0-63, 64-127, 128-149), starting on a chunk's first row and
  // inside one; documents of 1 and 2 tokens are shorter than the convolution.
  Qwen35Config c = small(2, true);
  c.max_position_embeddings = 256;
  Qwen35 m(c, kF64);
  randomize(m, 21);
  const Docs rows = {{2, 70, 1, 77}, {64, 3, 61, 22}, {150}};
  expect_documents_apart(m, ids_of(3, 150, 37, 21), rows, 1e-10);
  // Rows of 12: several documents inside one chunk.
  expect_documents_apart(m, ids_of(2, 12, 37, 22), {{1, 2, 4, 5}, {6, 6}}, 1e-10);
  // Both layer kinds at both ends, grouped DeltaNet heads of 2 on 2, untied, a 4-tap convolution.
  c = small(4, false);
  c.full = {false, true, false, false};
  c.linear_num_key_heads = 2, c.linear_num_value_heads = 4, c.linear_conv_kernel_dim = 4;
  c.max_position_embeddings = 256;
  Qwen35 u(c, kF64);
  randomize(u, 23);
  expect_documents_apart(u, ids_of(2, 131, 37, 23), {{3, 64, 1, 63}, {2, 2, 127}}, 1e-10);
}

TEST(Qwen35Model, PackedDocumentsEqualEachDocumentAloneTinyF32) {
  // The qwen3.5-tiny preset (three DeltaNet layers with 4 value heads on 2 key heads and 4-tap
  // convolutions, one attention layer) in f32: a packed row of three documents and rows of two,
  // across the chunks of 64, one document of 3 tokens (shorter than the kernel). To f32 rounding
  // (the f64 test above is exact to 1e-10): the chunks fall elsewhere in a document alone, and the
  // decay parameters' gradients sum every token's term (A_log and dt_bias differ by 3e-5 to 1.4e-4
  // with the compiler; expect_documents_apart gives them 10x the tolerance). 3e-4, not 1e-4: on the
  // GPU machine's CPU the other gradients that sum over tokens (the embedding, the first norm, the
  // convolution, in_proj_qkv) differed by 1.06e-4 to 1.44e-4 (call24), under 1e-4 on this one.
  auto cfg = models::config_from_preset("qwen3.5-tiny");
  auto m = std::dynamic_pointer_cast<Qwen35>(cfg->build(nn::InitOptions{.seed = 5}));
  ASSERT_TRUE(m);
  randomize(*m, 24);
  expect_documents_apart(*m, ids_of(3, 140, 4096, 24), {{3, 70, 67}, {64, 76}, {100, 40}}, 3e-4);
}

TEST(Qwen35Model, KeyPaddingBeforeOrAfterTheRealTokensChangesNothingForThem) {
  // Two rows: 6 real tokens then 4 padded ones (garbage ids), and 3 padded ones then 7 real. The
  // real tokens' logits and every gradient (the loss on real tokens only) equal each row's real
  // tokens alone. All DeltaNet layers: the attention's rotary positions would move with left
  // padding (the same angles rounded differently), which is not what this checks.
  Qwen35Config c = small(3, true);
  c.full = {false, false, false};
  c.linear_conv_kernel_dim = 4;
  Qwen35 m(c, kF64);
  randomize(m, 25);
  const Tensor ids = ids_of(2, 10, 37, 25);
  const Tensor mask = from_ints({1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1}, {2, 10}, DType::U8);
  Generator gen(26);
  const Tensor r = mul(randn({2, 10, 37}, gen, 1.0f, DType::F64), reshape(cast(mask, DType::F64), {2, 10, 1}));
  const Outputs padded = outputs_of(m, [&] { return m.forward(ids, mask); }, r);
  const Outputs alone = outputs_of(
      m,
      [&] {
        Tensor a = m.forward(slice(slice(ids, 0, 0, 1), 1, 0, 6)), b = m.forward(slice(slice(ids, 0, 1, 2), 1, 3, 10));
        return concat({concat({a, zeros({1, 4, 37}, DType::F64)}, 1), concat({zeros({1, 3, 37}, DType::F64), b}, 1)}, 0);
      },
      r);
  std::vector<double> real_padded, real_alone;
  const std::vector<double> mv = mask.to_double_vector();
  for (size_t i = 0; i < padded.logits.size(); ++i)
    if (mv[i / 37] != 0) real_padded.push_back(padded.logits[i]), real_alone.push_back(alone.logits[i]);
  EXPECT_LT(test::rel_error(real_padded, real_alone), 1e-12);
  for (const auto& [name, g] : alone.grads) EXPECT_LT(test::rel_error(padded.grads.at(name), g), 1e-12) << name;
  // Padding between real tokens would still decay the state and fill the convolution's window:
  // refused in one line (with doc_pos, per document: a padded document end then a new one is fine).
  const Tensor holes = from_ints({1, 1, 0, 1, 1, 1, 1, 1, 1, 1}, {1, 10}, DType::U8);
  const std::string e = error_of([&] { m.forward(slice(ids, 0, 0, 1), holes); });
  EXPECT_NE(e.find("padded token before the real token at 3"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos);
  NoGradGuard ng;
  EXPECT_NO_THROW(m.forward(slice(ids, 0, 0, 1), nn::TokenMask(holes, doc_positions({{3, 7}}))));
}

TEST(Qwen35Model, DocumentPositionsItCannotHonourAreOneLine) {
  Qwen35 m(small(2, true), nn::InitOptions{.seed = 1});
  const Tensor ids = ids_of(1, 6, 37, 27);
  for (const auto& c :
       std::vector<std::pair<Tensor, std::string>>{{from_ints({0, 1, 2, 4, 0, 1}, {1, 6}, DType::I32), "doc_pos[0, 3] = 4"},
                                                   {from_ints({0, 1, 2, 3, 4, 5}, {1, 6}, DType::I64), "i64"},
                                                   {from_ints({0, 1, 2}, {1, 3}, DType::I32), "[1, 6]"}}) {
    const Tensor& dp = c.first;  // not a structured binding: clang 14 cannot capture one in a lambda
    const std::string& fragment = c.second;
    const std::string e = error_of([&] { m.forward(ids, nn::TokenMask::documents(dp)); });
    EXPECT_NE(e.find(fragment), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  const std::string e = error_of([&] { m.hidden_states(ids, nn::TokenMask::documents(doc_positions({{6}})), 2); });
  EXPECT_NE(e.find("position offset"), std::string::npos) << e;
}

// On a GPU (skipped here): qwen3.5-tiny's packed rows in f32 against each document alone on the
// GPU and against the CPU's packed rows, logits and every gradient.
TEST(Qwen35Model, CudaPackedDocumentsMatchTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  auto cfg = models::config_from_preset("qwen3.5-tiny");
  auto cpu = std::dynamic_pointer_cast<Qwen35>(cfg->build(nn::InitOptions{.seed = 5}));
  auto gpu = std::dynamic_pointer_cast<Qwen35>(cfg->build(nn::InitOptions{.device = Device::cuda(), .seed = 5}));
  ASSERT_TRUE(cpu && gpu);
  randomize(*cpu, 28);
  {
    NoGradGuard ng;
    for (auto& [n, p] : gpu->named_parameters()) copy_(p, cpu->parameter(n).to(Device::cuda()));
  }
  const Docs rows = {{3, 70, 67}, {64, 76}, {1, 2, 137}};
  const Tensor ids = ids_of(3, 140, 4096, 28);
  // Packed against each document alone on the GPU: 1.0e-4 to 2.5e-4 over most gradients on an H100
  // (1c36c36, the same with the head-dim-256 and staged DeltaNet kernels on or off: cuBLAS's f32
  // products sum in other orders for other row counts), so 5e-4 there. The CPU's f32 lands there
  // too: 1.06e-4 to 2.12e-4 for four gradients (layer 0's in_proj_z, norm and out_proj, layer 2's
  // conv1d; the same on 2 and 16 cores, 1c36c36 and 1930a4d), so 5e-4 on both. Exactness is
  // PackedDocumentsEqualEachDocumentAlone's, in f64.
  const Outputs on_gpu = expect_documents_apart(*gpu, ids, rows, 5e-4);
  const Outputs on_cpu = expect_documents_apart(*cpu, ids, rows, 5e-4);
  EXPECT_LT(test::rel_error(on_gpu.logits, on_cpu.logits), 1e-4) << "logits";
  // GPU against CPU sums in other orders through three DeltaNet layers (each a chunked triangular
  // solve, whose f32 rounding the randomized weights amplify): 1.2e-4 to 1.7e-4 on an H100 for
  // three of the gradients (0797d07), so 5e-4 here; packed against each document alone on one
  // device, the point of this test, holds the bounds above.
  for (const auto& [name, g] : on_cpu.grads) EXPECT_LT(test::rel_error(on_gpu.grads.at(name), g), 5e-4) << name;
}

// transformers initialises A_log as log(U(0, 16)): decays down to -16 softplus(.) a token, so a
// chunk's cumulative log decay reaches hundreds and its exponentials underflow. The chunked
// kernels must stay exact there: in f64 against the token-by-token reference, and in f32 near it
// (every gradient within 1e-3 of the f64 one, A_log's included; parity.py's f64 arbiter leans on this).
TEST(Qwen35Model, StrongDecaysAsTransformersInitialisesThem) {
  Qwen35Config c = small(2, true);
  c.max_position_embeddings = 128;
  Qwen35 m(c, kF64);
  randomize(m, 7);
  {
    Generator gen(17);
    NoGradGuard ng;
    for (auto& [n, p] : m.named_parameters()) {
      if (n.ends_with("A_log")) copy_(p, log(rand_uniform(p.shape(), gen, 0.0f, 16.0f, DType::F64)));
      if (n.ends_with("dt_bias")) copy_(p, full(p.shape(), 1.0, DType::F64));
    }
  }
  const Tensor ids = ids_of(2, 70, 37, 8);
  expect_matches_reference(m, ids, Tensor());
  // f32: the chunked model against the f64 token-by-token reference.
  Qwen35 m32(c, nn::InitOptions{.dtype = DType::F32, .seed = 3});
  {
    NoGradGuard ng;
    for (auto& [n, p] : m32.named_parameters()) copy_(p, cast(m.parameter(n), DType::F32));
  }
  Generator gen(99);
  const Tensor r = randn({2, 70, c.vocab_size}, gen, 1.0f, DType::F64);
  zero_grad(m.parameters());
  sum_all(mul(reference_logits(m, ids, Tensor()), r)).backward();
  zero_grad(m32.parameters());
  sum_all(mul(m32.forward(ids), cast(r, DType::F32))).backward();
  for (auto& [n, p] : m32.named_parameters()) {
    const std::vector<double> got = p.grad().to_double_vector(), want = m.parameter(n).grad().to_double_vector();
    double num = 0, den = 1e-300;
    for (size_t i = 0; i < got.size(); ++i) num += (got[i] - want[i]) * (got[i] - want[i]), den += want[i] * want[i];
    EXPECT_LE(std::sqrt(num / den), 1e-3) << n;  // measured 4e-6 .. 6e-5
  }
}

TEST(Qwen35Model, DecayGradientNoiseFloor) {
  // The decay parameters' gradient in f32 against f64 on parity.py's grouped-head shape (Hk 2, Hv 4,
  // T 77, three DeltaNet layers) with transformers' A_log = log(U(0, 16)): where a head's decay is
  // strong it forgets within a step and the exact gradient nearly vanishes (1e-10 beside 1e-3 for
  // the layer's beta projection), and f32 gives rounding noise there, as any f32 run must. So the
  // error is bounded against the larger of the gradient's norm and 1% of in_proj_b's gradient norm:
  // the scale parity.py judges both sides' decay parameters by. in_proj_a (the projection the decay
  // is computed from) gets the same decay gradient times per-token factors: seed 3's layer 0 has it
  // at 1.4e-4 of in_proj_b's and 1.2% off in f32, against 1e-3 for parity.
  Qwen35Config c;
  c.vocab_size = 509, c.hidden_size = 48, c.intermediate_size = 88, c.num_hidden_layers = 4;
  c.num_attention_heads = 3, c.num_key_value_heads = 1, c.head_dim = 32, c.partial_rotary_factor = 0.25;
  c.linear_num_key_heads = 2, c.linear_key_head_dim = 16, c.linear_num_value_heads = 4, c.linear_value_head_dim = 12;
  c.linear_conv_kernel_dim = 4, c.max_position_embeddings = 512, c.rope_theta = 1e6;
  c.full = {false, false, true, false};
  const int64_t B = 3, T = 77;
  double tiny_seen = 1.0;  // the smallest own-norm / beta-norm ratio met: the floor must matter somewhere
  for (uint64_t seed : {1, 2, 3}) {
    Qwen35 m64(c, nn::InitOptions{.dtype = DType::F64, .seed = seed});
    Qwen35 m32(c, nn::InitOptions{.dtype = DType::F32, .seed = seed});
    {
      NoGradGuard ng;
      Generator gen(seed);
      for (auto& [n, p] : m64.named_parameters()) {
        Tensor v = p;
        if (n.ends_with("A_log")) v = log(rand_uniform(p.shape(), gen, 0.0f, 16.0f, DType::F64));
        copy_(p, cast(cast(v, DType::F32), DType::F64));  // f32-representable: both runs see one model
        copy_(m32.parameter(n), cast(v, DType::F32));
      }
    }
    const Tensor ids = ids_of(B, T, c.vocab_size, seed), labels = ids_of(B, T, c.vocab_size, seed + 10);
    m64.loss(ids, labels).backward();
    m32.loss(ids, labels).backward();
    auto norm_of = [](const std::vector<double>& a) {
      double s = 0;
      for (double x : a) s += x * x;
      return std::sqrt(s);
    };
    for (int l : {0, 1, 3}) {
      const std::string f = "model.layers." + std::to_string(l) + ".linear_attn.";
      const double beta = norm_of(m64.parameter(f + "in_proj_b.weight").grad().to_double_vector());
      for (const char* n : {"A_log", "dt_bias", "in_proj_a.weight"}) {
        const std::vector<double> want = m64.parameter(f + n).grad().to_double_vector();
        const std::vector<double> got = m32.parameter(f + n).grad().to_double_vector();
        std::vector<double> d(want.size());
        for (size_t i = 0; i < d.size(); ++i) d[i] = got[i] - want[i];
        tiny_seen = std::min(tiny_seen, norm_of(want) / beta);
        EXPECT_LT(norm_of(d) / std::max(norm_of(want), 0.01 * beta), 1e-3) << "seed " << seed << " " << f << n;
      }
    }
  }
  EXPECT_LT(tiny_seen, 1e-4) << "no head with a vanishing decay gradient was drawn: the floor went untested";
}
