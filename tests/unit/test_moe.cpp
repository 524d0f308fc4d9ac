// Mixture of experts on the CPU: the router against hand values (softmax in f32, top-k order and
// ties, renormalisation, the weights' dtype), float64 gradchecks of the router, the load-balancing
// loss and the grouped expert FFN, the grouped FFN against a per-token loop, the tiny Qwen3-MoE and
// Mixtral presets training, both checkpoint layouts loading (the hub's per-expert tensors and
// transformers 5's fused ones), a checkpointed MoE layer recomputing its routing identically, and
// the plan equal to a CPU run's peak.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "io/peft_adapter.h"
#include "io/weight_save.h"
#include "leantrain/safetensors.h"
#include "leantrain/autograd.h"
#include "leantrain/checkpoint.h"
#include "leantrain/nn_moe.h"
#include "leantrain/choices.h"
#include "leantrain/plan.h"
#include "leantrain/train.h"
#include "models/llama.h"
#include "train/checkpoint_weights.h"
#include "train/lora_setup.h"
#include "unit/gradcheck.h"

using namespace lt;
using models::Llama;
using models::LlamaConfig;

namespace {

using V = std::vector<Tensor>;

Tensor ids_of(int64_t B, int64_t T, int64_t Vocab, uint64_t seed) {
  std::vector<int64_t> v(size_t(B * T));
  for (size_t i = 0; i < v.size(); ++i) v[i] = int64_t(rng_mix64(seed * 7919 + i) % uint64_t(Vocab));
  return from_ints(v, {B, T});
}

std::vector<int64_t> ints(const Tensor& t) {
  std::vector<int64_t> out;
  for (double v : t.to_double_vector()) out.push_back(int64_t(v));
  return out;
}

TEST(MoeRoute, SoftmaxTopKAndRenormAsTransformers) {
  // Row 0: distinct logits; row 1: a tie between experts 1 and 3 (the lower one first).
  Tensor logits = from_vector(std::vector<float>{0.5f, 2.0f, -1.0f, 1.0f, 0.0f, 1.5f, 0.25f, 1.5f}, {2, 4});
  MoeRoute plain = moe_route(logits, 2, false, DType::F32);
  EXPECT_EQ(ints(plain.idx), (std::vector<int64_t>{1, 3, 1, 3}));
  const std::vector<float> w = plain.weights.to_float_vector();
  const double z0 = std::exp(0.5) + std::exp(2.0) + std::exp(-1.0) + std::exp(1.0);
  EXPECT_NEAR(w[0], std::exp(2.0) / z0, 1e-6);
  EXPECT_NEAR(w[1], std::exp(1.0) / z0, 1e-6);
  EXPECT_EQ(w[2], w[3]);
  MoeRoute norm = moe_route(logits, 2, true, DType::F32);
  const std::vector<float> wn = norm.weights.to_float_vector();
  EXPECT_NEAR(wn[0], std::exp(2.0) / (std::exp(2.0) + std::exp(1.0)), 1e-6);
  EXPECT_NEAR(wn[0] + wn[1], 1.0, 1e-6);
  EXPECT_EQ(wn[2], 0.5f);
  // Qwen3-MoE rounds the weights to the logits' dtype once, from the f32 renormalised values.
  MoeRoute q = moe_route(cast(logits, DType::BF16), 2, true, DType::BF16);
  EXPECT_EQ(q.weights.dtype(), DType::BF16);
  const std::vector<float> wq = q.weights.to_float_vector();
  EXPECT_EQ(wq[0], cast(from_vector(std::vector<float>{wn[0]}, {1}), DType::BF16).to_float_vector()[0]);
  // All of the experts, ties everywhere: the index order.
  MoeRoute all = moe_route(zeros({1, 5}), 5, true, DType::F32);
  EXPECT_EQ(ints(all.idx), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  for (float v : all.weights.to_float_vector()) EXPECT_FLOAT_EQ(v, 0.2f);
}

TEST(MoeRoute, Gradcheck) {
  for (bool renorm : {false, true})
    EXPECT_TRUE(test::gradcheck([=](const V& x) { return moe_route(x[0], 3, renorm, DType::F64).weights; },
                                {test::rand64({5, 6}, 11)}))
        << renorm;
}

// coef E sum_e F_e P_e over two layers' routers pooled, as transformers' load_balancing_loss_func.
TEST(MoeAuxLoss, ValueAndGradient) {
  const int64_t E = 4, k = 2;
  Tensor z1 = test::rand64({6, E}, 21), z2 = test::rand64({6, E}, 22);
  auto total = [&](const V& x, std::shared_ptr<MoeAuxLoss>* keep) {
    auto aux = std::make_shared<MoeAuxLoss>();
    aux->coef = 0.01, aux->experts = E;
    MoeRoute r1 = moe_route(x[0], k, true, DType::F64, aux), r2 = moe_route(x[1], k, true, DType::F64, aux);
    if (keep) *keep = aux;
    Tensor base = add(sum_all(mul(r1.weights, r1.weights)), sum_all(r2.weights));
    return moe_add_aux_loss(base, aux);
  };
  // The value by hand.
  std::shared_ptr<MoeAuxLoss> aux;
  Tensor with = total({z1, z2}, &aux);
  double f[4] = {0, 0, 0, 0}, p[4] = {0, 0, 0, 0};
  for (const Tensor& z : {z1, z2}) {
    const std::vector<double> v = z.to_double_vector();
    for (int64_t n = 0; n < 6; ++n) {
      double mx = -1e300, s = 0;
      for (int64_t e = 0; e < E; ++e) mx = std::max(mx, v[size_t(n * E + e)]);
      std::vector<double> pr(E);
      for (int64_t e = 0; e < E; ++e) s += pr[size_t(e)] = std::exp(v[size_t(n * E + e)] - mx);
      std::vector<int64_t> order{0, 1, 2, 3};
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return pr[size_t(a)] > pr[size_t(b)]; });
      for (int64_t e = 0; e < E; ++e) p[e] += pr[size_t(e)] / s / 12.0;
      for (int64_t j = 0; j < k; ++j) f[order[size_t(j)]] += 1.0 / 12.0;
    }
  }
  double want = 0;
  for (int64_t e = 0; e < E; ++e) want += f[e] * p[e];
  want *= 0.01 * E;
  Tensor without;
  {
    NoGradGuard ng;
    MoeRoute r1 = moe_route(z1, k, true, DType::F64), r2 = moe_route(z2, k, true, DType::F64);
    without = add(sum_all(mul(r1.weights, r1.weights)), sum_all(r2.weights));
  }
  EXPECT_NEAR(with.item() - without.item(), want, 1e-12);
  EXPECT_TRUE(test::gradcheck([&](const V& x) { return total(x, nullptr); }, {z1, z2}));
}

// The experts' MLP over routed rows against a loop over tokens and their experts (slices and plain
// ops), then a gradcheck of everything: the input, both stacked weights and the router logits.
Tensor moe_ffn(const Tensor& x, const Tensor& logits, const Tensor& gate_up, const Tensor& down, int64_t k, bool renorm) {
  MoeRoute r = moe_route(logits, k, renorm, x.dtype());
  MoeDispatch d = moe_dispatch(r.idx, gate_up.size(0));
  Tensor gu = grouped_linear(moe_gather(x, d), gate_up, d);
  return moe_combine(grouped_swiglu_linear(gu, down, d), r.weights, r.idx, d);
}

TEST(MoeExperts, GroupedMatchesPerTokenLoopAndGradcheck) {
  const int64_t N = 7, C = 5, F = 3, E = 4, k = 2;
  Tensor x = test::rand64({N, C}, 1), z = test::rand64({N, E}, 2);
  Tensor gate_up = test::rand64({E, 2 * F, C}, 3), down = test::rand64({E, C, F}, 4);
  Tensor y = moe_ffn(x, z, gate_up, down, k, true);
  MoeRoute r = moe_route(z, k, true, DType::F64);
  const std::vector<int64_t> idx = ints(r.idx);
  const std::vector<double> w = r.weights.to_double_vector(), got = y.to_double_vector();
  NoGradGuard ng;
  for (int64_t n = 0; n < N; ++n) {
    Tensor xn = slice(x, 0, n, n + 1);
    Tensor want = zeros({1, C}, DType::F64);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = idx[size_t(n * k + j)];
      Tensor gu = linear(xn, select(gate_up, 0, e), Tensor());
      Tensor h = mul(silu(slice(gu, 1, 0, F)), slice(gu, 1, F, 2 * F));
      // mul by an f64 tensor (scale() takes an f32 factor)
      want = add(want, mul(linear(h, select(down, 0, e), Tensor()), full({1}, w[size_t(n * k + j)], DType::F64)));
    }
    const std::vector<double> wv = want.to_double_vector();
    for (int64_t c = 0; c < C; ++c) EXPECT_NEAR(got[size_t(n * C + c)], wv[size_t(c)], 1e-12) << n << " " << c;
  }
}

TEST(MoeExperts, Gradcheck) {
  const int64_t N = 6, C = 4, F = 3, E = 3;
  EXPECT_TRUE(test::gradcheck([](const V& x) { return moe_ffn(x[0], x[1], x[2], x[3], 2, true); },
                              {test::rand64({N, C}, 5), test::rand64({N, E}, 6), test::rand64({E, 2 * F, C}, 7),
                               test::rand64({E, C, F}, 8)}));
  // Experts no token chose (5 experts, 3 tokens, k 1): their weight gradients are zeros.
  EXPECT_TRUE(test::gradcheck([](const V& x) { return moe_ffn(x[0], x[1], x[2], x[3], 1, false); },
                              {test::rand64({3, C}, 9), test::rand64({3, 5}, 10), test::rand64({5, 2 * F, C}, 11),
                               test::rand64({5, C, F}, 12)}));
}

TEST(MoeExperts, WeightsInOutLayoutAndWgrad) {
  const int64_t R = 5, E = 2;
  Tensor idx = from_ints({1, 0, 1, 1, 0}, {5, 1}, DType::I32);
  MoeDispatch d = moe_dispatch(idx, E);
  EXPECT_EQ(ints(d.offsets), (std::vector<int64_t>{0, 2, 5}));
  EXPECT_EQ(ints(d.rows), (std::vector<int64_t>{1, 4, 0, 2, 3}));
  EXPECT_EQ(ints(d.pos), (std::vector<int64_t>{2, 0, 3, 4, 1}));
  Tensor xs = test::rand64({R, 3}, 13), w = test::rand64({E, 3, 4}, 14);
  EXPECT_TRUE(test::gradcheck([&](const V& a) { return grouped_linear(a[0], a[1], d, true); }, {xs, w}));
  EXPECT_TRUE(test::gradcheck([&](const V& a) { return grouped_linear(a[0], a[1], d, false); },
                              {xs, test::rand64({E, 4, 3}, 15)}));
}

TEST(MoeExperts, LoraLinearIsTheBasePlusTheAdaptersTermAndGradchecks) {
  // 9 rows over 3 experts, expert 2 without rows: y = xs w_e^T + s (xs lin_e^T) lout_e.
  const int64_t R = 9, E = 3, in = 5, out = 4, r = 2;
  const double s = 2.0;
  Tensor idx = from_ints({1, 0, 1, 1, 0, 0, 1, 0, 1}, {R, 1}, DType::I32);
  MoeDispatch d = moe_dispatch(idx, E);
  const V args = {test::rand64({R, in}, 31), test::rand64({E, out, in}, 32), test::rand64({E, r, in}, 33),
                  test::rand64({E, r, out}, 34)};
  {
    NoGradGuard ng;
    const Tensor got = grouped_lora_linear(args[0], args[1], args[2], args[3], s, d);
    const Tensor t = grouped_linear(args[0], args[2], d);
    const Tensor want = add(grouped_linear(args[0], args[1], d),
                            mul(grouped_linear(t, args[3], d, /*w_in_out=*/true), full({1}, s, DType::F64)));
    const std::vector<double> g = got.to_double_vector(), w = want.to_double_vector();
    ASSERT_EQ(g.size(), w.size());
    for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], w[i], 1e-12) << i;
  }
  EXPECT_TRUE(test::gradcheck([&](const V& a) { return grouped_lora_linear(a[0], a[1], a[2], a[3], s, d); }, args));
  // A frozen base (the LoRA case): the rows and both factors still get their gradients.
  Tensor frozen = args[1].detach();
  EXPECT_TRUE(test::gradcheck([&](const V& a) { return grouped_lora_linear(a[0], frozen, a[1], a[2], s, d); },
                              {args[0], args[2], args[3]}));
  // Factors of the wrong rank are refused with the shapes named.
  try {
    grouped_lora_linear(args[0], args[1], args[2], test::rand64({E, r + 1, out}, 35), s, d);
    FAIL() << "a rank mismatch was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("adapter factors"), std::string::npos) << e.what();
  }
}

LlamaConfig tiny(const std::string& preset, bool aux) {
  LlamaConfig c = LlamaConfig::preset(preset);
  c.output_router_logits = aux;
  c.router_aux_loss_coef = 0.02;
  return c;
}

TEST(MoeModel, ModelGradcheckBothFamilies) {
  for (const char* preset : {"qwen3-moe-tiny", "mixtral-tiny"}) {
    LlamaConfig c = tiny(preset, true);
    c.num_hidden_layers = 2, c.vocab_size = 13, c.hidden_size = 12, c.num_attention_heads = 2;
    c.num_key_value_heads = 1, c.head_dim = 6, c.intermediate_size = 10, c.moe_intermediate_size = 5;
    c.num_experts = 4;
    Llama m(c, {.dtype = DType::F64, .seed = 3});
    {  // weights of std 0.3: router logits far apart, so no perturbation flips a top-k choice
      Generator gen(3);
      NoGradGuard ng;
      for (auto& [n, p] : m.named_parameters()) copy_(p, randn(p.shape(), gen, 0.3f, p.dtype()));
    }
    const Tensor ids = ids_of(2, 3, 13, 4), targets = ids_of(2, 3, 13, 5);
    EXPECT_TRUE(test::gradcheck([&](const V&) { return m.loss(ids, targets); }, m.parameters(),
                                test::GradcheckOptions{.eps = 1e-6, .atol = 1e-6, .rtol = 1e-4}))
        << preset;
  }
}

TEST(MoeModel, TinyPresetsTrainOnTheCpu) {
  for (const char* preset : {"qwen3-moe-tiny", "mixtral-tiny"}) {
    LlamaConfig c = tiny(preset, true);
    c.vocab_size = 64;
    Llama m(c, {.seed = 10});
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
    EXPECT_NEAR(losses.front(), std::log(64.0), 0.3) << preset;
    EXPECT_LT((losses[27] + losses[28] + losses[29]) / 3, 0.85 * losses.front()) << preset;
  }
}

TEST(MoeModel, NamesAndLayersAsTransformers) {
  Llama q(LlamaConfig::preset("qwen3-moe-tiny"), {.device = Device::meta()});
  std::map<std::string, Shape> names;
  for (auto& [n, p] : q.named_parameters()) names[n] = p.shape();
  EXPECT_EQ(names.at("model.layers.0.mlp.gate.weight"), Shape({8, 32}));
  EXPECT_EQ(names.at("model.layers.0.mlp.experts.gate_up_proj"), Shape({8, 48, 32}));
  EXPECT_EQ(names.at("model.layers.0.mlp.experts.down_proj"), Shape({8, 32, 24}));
  EXPECT_EQ(names.at("model.layers.1.mlp.gate_proj.weight"), Shape({48, 32}));  // mlp_only_layers
  EXPECT_EQ(names.at("model.layers.0.self_attn.q_norm.weight"), Shape({12}));
  EXPECT_EQ(double(q.num_parameters()), LlamaConfig::preset("qwen3-moe-tiny").num_parameters());
  Llama big(LlamaConfig::preset("qwen3-30b-a3b"), {.device = Device::meta()});
  EXPECT_NEAR(double(big.num_parameters()), 30.53e9, 0.01e9);  // Qwen3-30B-A3B: 30.5B
  Llama mx(LlamaConfig::preset("mixtral-8x7b"), {.device = Device::meta()});
  EXPECT_NEAR(double(mx.num_parameters()), 46.70e9, 0.01e9);  // Mixtral-8x7B: 46.7B
  // The hub layout names each expert apart.
  std::set<std::string> keys;
  for (const models::CheckpointTensor& t : mx.checkpoint_tensors()) keys.insert(t.name);
  EXPECT_TRUE(keys.count("model.layers.3.block_sparse_moe.gate.weight"));
  EXPECT_TRUE(keys.count("model.layers.3.block_sparse_moe.experts.7.w3.weight"));
  EXPECT_FALSE(keys.count("model.layers.3.mlp.experts.gate_up_proj"));
  LlamaConfig rt = LlamaConfig::from_json(nlohmann::json::parse(LlamaConfig::preset("qwen3-moe-tiny").to_json()));
  EXPECT_EQ(rt.num_experts, 8);
  EXPECT_EQ(rt.mlp_only_layers, std::vector<int64_t>{1});
  EXPECT_TRUE(rt.norm_topk_prob);
  nlohmann::json j = nlohmann::json::parse(LlamaConfig::preset("mixtral-tiny").to_json());
  j["router_jitter_noise"] = 0.1;
  EXPECT_THROW(LlamaConfig::from_json(j), Error);
}

// Saved in the hub's per-expert layout, read back; and transformers 5's fused tensors read too.
TEST(MoeModel, CheckpointLayoutsLoad) {
  namespace fs = std::filesystem;
  for (const char* preset : {"qwen3-moe-tiny", "mixtral-tiny"}) {
    Llama a(LlamaConfig::preset(preset), {.seed = 1});
    const fs::path dir = fs::temp_directory_path() / ("lt_moe_" + std::string(preset));
    fs::remove_all(dir);
    fs::create_directories(dir / "hub");
    fs::create_directories(dir / "fused");
    save_model_weights((dir / "hub").string(), a, int64_t(1) << 30);
    std::vector<std::pair<std::string, Tensor>> fused;
    for (auto& [n, p] : a.named_parameters()) fused.emplace_back(n, p);
    io::save_weight_files((dir / "fused").string(), fused, int64_t(1) << 30);
    for (const char* layout : {"hub", "fused"}) {
      Llama b(LlamaConfig::preset(preset), {.seed = 2});
      load_model_weights((dir / layout).string(), b);
      auto pa = a.named_parameters(), pb = b.named_parameters();
      ASSERT_EQ(pa.size(), pb.size());
      for (size_t i = 0; i < pa.size(); ++i)
        EXPECT_EQ(pa[i].second.to_float_vector(), pb[i].second.to_float_vector()) << preset << " " << layout << " "
                                                                                  << pa[i].first;
    }
    fs::remove_all(dir);
  }
}

// Checkpointing a decoder layer recomputes its routing identically: the same gradients, bit for
// bit, with the load-balancing loss on (whose sums the recomputation must not add twice).
TEST(MoeModel, CheckpointedLayersRecomputeRoutingIdentically) {
  for (const char* preset : {"qwen3-moe-tiny", "mixtral-tiny"}) {
    auto grads = [&](const std::string& spec, double* loss) {
      Llama m(tiny(preset, true), {.seed = 6});
      if (!spec.empty()) nn::apply_checkpointing(m, spec);
      Tensor l = m.loss(ids_of(2, 6, 4096, 6), ids_of(2, 6, 4096, 7));
      *loss = l.item();
      l.backward();
      std::vector<float> g;
      for (auto& [n, p] : m.named_parameters())
        for (float v : p.grad().to_float_vector()) g.push_back(v);
      return g;
    };
    double l0 = 0, l1 = 0;
    const std::vector<float> plain = grads("", &l0), ck = grads("blocks", &l1);
    EXPECT_EQ(l0, l1) << preset;
    ASSERT_EQ(plain.size(), ck.size());
    for (size_t i = 0; i < plain.size(); ++i) ASSERT_EQ(plain[i], ck[i]) << preset << " [" << i << "]";
  }
}

// The aux loss changes the loss by coef * (its value) and the router's gradient.
TEST(MoeModel, OutputRouterLogitsAddsTheAuxLoss) {
  Llama off(tiny("mixtral-tiny", false), {.seed = 4}), on(tiny("mixtral-tiny", true), {.seed = 4});
  const Tensor ids = ids_of(2, 5, 4096, 1), t = ids_of(2, 5, 4096, 2);
  const double a = off.loss(ids, t).item(), b = on.loss(ids, t).item();
  // Two MoE layers, 2 of 4 experts: the aux loss lies in [k, E] = [2, 4] (coef 0.02 times that).
  EXPECT_GT(b - a, 0.02 * 1.9);
  EXPECT_LT(b - a, 0.02 * 4.0);
}

// Padding after a row's text (--packing none|docs) is left out of the load-balancing loss, as
// transformers leaves out attention_mask's zeros: a padded row with its text mask has the loss and
// router gradients of the unpadded row. Without the mask the padding would count.
TEST(MoeModel, RowPaddingIsLeftOutOfTheAuxLoss) {
  for (const char* preset : {"qwen3-moe-tiny", "mixtral-tiny"}) {
    const int64_t n = 7, T = 12;
    const Tensor seq = ids_of(1, n + 1, 4096, 31);
    const Tensor x = contiguous(slice(seq, 1, 0, n)), y = contiguous(slice(seq, 1, 1, n + 1));
    std::vector<int64_t> xp(T, 0), yp(T, -100);
    const std::vector<int64_t> xv = ints(x), yv = ints(y);
    std::vector<int64_t> text(T, 0);
    for (int64_t t = 0; t < n; ++t) xp[size_t(t)] = xv[size_t(t)], yp[size_t(t)] = yv[size_t(t)], text[size_t(t)] = 1;
    auto run = [&](const Tensor& ids, const Tensor& targets, const nn::TokenMask& mask, std::vector<float>* grad) {
      Llama m(tiny(preset, true), {.seed = 8});
      Tensor l = m.loss(ids, targets, mask);
      l.backward();
      for (auto& [name, p] : m.named_parameters())
        if (name.find(".gate.weight") != std::string::npos)
          for (float v : p.grad().to_float_vector()) grad->push_back(v);
      return l.item();
    };
    std::vector<float> g0, g1, g2;
    nn::TokenMask mask;
    mask.text = from_ints(text, {1, T}, DType::U8);
    const double plain = run(x, y, {}, &g0);
    const double masked = run(from_ints(xp, {1, T}), from_ints(yp, {1, T}), mask, &g1);
    const double counted = run(from_ints(xp, {1, T}), from_ints(yp, {1, T}), {}, &g2);
    EXPECT_NEAR(masked, plain, 1e-6) << preset;
    ASSERT_EQ(g0.size(), g1.size());
    for (size_t i = 0; i < g0.size(); ++i) ASSERT_NEAR(g1[i], g0[i], 1e-6) << preset << " router grad [" << i << "]";
    EXPECT_GT(std::abs(counted - plain), 1e-6) << preset;  // the padding's routing would count
  }
}

// Breadth-first micro-batches (--fused-step with --micro-batch) over checkpointed layers: each
// micro-batch's load-balancing loss reaches its own routers, recomputed after every forward ran
// (checkpoint() restores the forward's context), so the run equals plain accumulation bit for bit.
TEST(MoeModel, BreadthFirstMicroBatchesWithTheAuxLossMatchAccumulation) {
  namespace fs = std::filesystem;
  const fs::path cfg = fs::temp_directory_path() / "lt_moe_breadth_first.json";
  {
    LlamaConfig c = tiny("qwen3-moe-tiny", true);
    c.vocab_size = 64;
    std::ofstream(cfg) << c.to_json();
  }
  RunConfig c;
  c.model_config = cfg.string();
  c.data = "synthetic";
  c.batch = 4;
  c.micro_batch = 2;
  c.seq_len = 8;
  c.steps = 3;
  c.eval_batches = 0;
  c.device = "cpu";
  c.warmup = 0;
  c.optimizer = *choice_named<OptimizerKind>("sgd");
  c.lr = 0.1;
  c.checkpoint = nn::CheckpointSpec::blocks();
  RunResult plain = train(c);
  c.fused_step = true;
  RunResult fused = train(c);
  ASSERT_EQ(fused.losses.size(), 3u);
  EXPECT_EQ(fused.losses, plain.losses);
  fs::remove(cfg);
}

// The dry run on meta predicts a CPU run's peak to the byte: the routing buffers are sized by the
// tokens and k alone.
TEST(MoeModel, PlanEqualsTheCpuRunsPeak) {
  for (const char* model : {"qwen3-moe-tiny", "mixtral-tiny"})
    for (const char* checkpoint : {"none", "blocks"}) {
      RunConfig c;
      c.model = model;
      c.data = "synthetic";
      c.batch = 2;
      c.seq_len = 16;
      c.steps = 2;
      c.eval_batches = 1;
      c.device = "cpu";
      c.checkpoint = nn::parse_checkpoint_spec(checkpoint);
      c.precision = Precision::MixedBf16;
      PlanResult p = plan_run(c, PlanOptions{"cpu"});
      const int64_t before = allocator_for(Device::cpu()).stats().allocated_bytes.current;
      RunResult r = train(c);
      EXPECT_EQ(r.memory.allocated_bytes.peak - before, p.peak_allocated) << model << " " << checkpoint;
    }
}

// LoRA on the experts: the adapters' gradients by finite differences; the merged model's logits
// equal the adapted one's; the adapter file (PEFT's layout) read back gives the same logits.
TEST(MoeLora, GradcheckMergeAndAdapterFile) {
  for (const char* preset : {"qwen3-moe-tiny", "mixtral-tiny"}) {
    LlamaConfig c = LlamaConfig::preset(preset);
    c.num_hidden_layers = 2, c.vocab_size = 13, c.hidden_size = 12, c.num_attention_heads = 2;
    c.num_key_value_heads = 1, c.head_dim = 6, c.intermediate_size = 10, c.moe_intermediate_size = 5;
    c.num_experts = 4;
    auto make = [&] {
      auto m = std::make_shared<Llama>(c, nn::InitOptions{.dtype = DType::F64, .seed = 3});
      Generator gen(3);
      NoGradGuard ng;
      for (auto& [n, p] : m->named_parameters()) copy_(p, randn(p.shape(), gen, 0.3f, p.dtype()));
      return m;
    };
    auto m = make();
    std::vector<std::string> experts;
    for (auto& [path, e] : moe_experts(*m)) experts.push_back(path);
    ASSERT_EQ(experts.size(), std::string(preset) == "mixtral-tiny" ? 2u : 1u);
    install_lora(*m, {}, nn::LoraOptions{2, 4.0, 0.0}, 5, DType::F64, experts);
    {  // lora_B starts at zero: random values so that the update shows
      Generator gen(9);
      NoGradGuard ng;
      for (auto& [n, p] : m->named_trainable_parameters()) copy_(p, randn(p.shape(), gen, 0.3f, p.dtype()));
    }
    std::vector<std::string> names;
    for (auto& [n, p] : m->named_trainable_parameters()) names.push_back(n);
    EXPECT_EQ(names.front(), "model.layers.0.mlp.experts.base_layer.lora_A.weight") << preset;
    EXPECT_EQ(m->parameter("model.layers.0.mlp.experts.lora_B.weight").shape(), Shape({4, 2, c.expert_intermediate()})) << preset;
    const Tensor ids = ids_of(2, 3, 13, 4), targets = ids_of(2, 3, 13, 5);
    EXPECT_TRUE(test::gradcheck([&](const V&) { return m->loss(ids, targets); }, m->trainable_parameters(),
                                test::GradcheckOptions{.eps = 1e-6, .atol = 1e-6, .rtol = 1e-4}))
        << preset;
    Tensor adapted;
    {
      NoGradGuard ng;
      adapted = m->forward(ids);
    }
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / ("lt_moe_lora_" + std::string(preset));
    fs::remove_all(dir);
    fs::create_directories(dir);
    write_lora_adapter(dir.string(), *m, "base");
    {
      io::SafetensorsReader r((dir / io::kAdapterWeightsFile).string());
      const io::TensorEntry* b = r.find("base_model.model.model.layers.0.mlp.experts.base_layer.lora_B.weight");
      ASSERT_NE(b, nullptr);
      EXPECT_EQ(b->shape, Shape({12, 2 * 4}));  // PEFT's [in, r E]
      EXPECT_EQ(io::read_peft_adapter_config(dir.string()).target_parameters,
                (std::vector<std::string>{"experts.gate_up_proj", "experts.down_proj"}));
    }
    auto fresh = make();
    attach_peft_adapter(*fresh, dir.string());
    NoGradGuard ng;
    const std::vector<double> want = adapted.to_double_vector(), back = fresh->forward(ids).to_double_vector();
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(back[i], want[i], 1e-12) << preset << " adapter file [" << i << "]";
    merge_lora(*m);
    const std::vector<double> merged = m->forward(ids).to_double_vector();
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(merged[i], want[i], 1e-6) << preset << " merged [" << i << "]";  // the delta formed in f32
    for (const models::CheckpointTensor& t : m->checkpoint_tensors())
      EXPECT_EQ(t.name.find("lora"), std::string::npos) << t.name;
    fs::remove_all(dir);
  }
}

}  // namespace
