// LoRA (leantrain/nn_lora.h, train/lora_setup.h): the forward is base + (alpha/r) x A^T B^T,
// gradients reach A and B (float64 finite differences) and never the frozen base, PEFT's init,
// Hugging Face names kept, the merged weight, and the --lora-targets refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>

#include "error_of.h"
#include "gradcheck.h"
#include "leantrain/models.h"
#include "leantrain/nn_lora.h"
#include "leantrain/ops_lora.h"
#include "leantrain/plan.h"
#include "leantrain/safetensors.h"
#include "models/llama.h"
#include "small_models.h"
#include "train/lora_setup.h"

namespace lt {
namespace {
using test::error_of;

struct LoraFixture {
  explicit LoraFixture(nn::WeightLayout layout, int64_t in = 6, int64_t out = 5, nn::LoraOptions o = {3, 6, 0}) {
    nn::ParamFactory pf(nn::InitOptions{.dtype = DType::F64, .seed = 7, .flat = false});
    base = std::make_shared<nn::Linear>(pf, in, out, nn::LinearOptions{.layout = layout, .bias_init = nn::Init::normal(0.5)});
    pf.materialize();
    lora = std::make_shared<nn::LoraLinear>(base, o, pf);
    pf.materialize();
  }
  // Gives B values (it starts at zero) so that the update shows.
  void randomize_b(uint64_t seed = 3) {
    NoGradGuard ng;
    copy_(lora->lora_B(), test::rand64(lora->lora_B().shape(), seed));
  }
  // base(x) + s * x A^T B^T, composed from ops.
  Tensor reference(const Tensor& x) const {
    NoGradGuard ng;
    const bool in_out = lora->shape().layout == nn::WeightLayout::InOut;
    Tensor y = linear(x, base->weight(), base->bias(), in_out);
    Tensor d = matmul(matmul(x, lora->lora_A(), false, true), lora->lora_B(), false, true);
    return add(y, scale(d, lora->scaling()));
  }
  std::shared_ptr<nn::Linear> base;
  std::shared_ptr<nn::LoraLinear> lora;
};

void expect_close(const Tensor& a, const Tensor& b, double tol) {
  auto va = a.to_double_vector(), vb = b.to_double_vector();
  ASSERT_EQ(va.size(), vb.size());
  for (size_t i = 0; i < va.size(); ++i) EXPECT_NEAR(va[i], vb[i], tol) << "element " << i;
}

TEST(Lora, ForwardIsBasePlusScaledUpdateInBothLayouts) {
  for (auto layout : {nn::WeightLayout::OutIn, nn::WeightLayout::InOut}) {
    LoraFixture f(layout);
    f.randomize_b();
    Tensor x = test::rand64({2, 4, 6}, 11);
    NoGradGuard ng;
    Tensor y = f.lora->forward(x);
    EXPECT_EQ(y.shape(), (Shape{2, 4, 5}));
    expect_close(y, f.reference(x), 1e-12);
    // the update is really there (B non-zero): the output differs from the base's
    auto vy = y.to_double_vector(), vb = f.base->forward(x).to_double_vector();
    double diff = 0;
    for (size_t i = 0; i < vy.size(); ++i) diff = std::max(diff, std::abs(vy[i] - vb[i]));
    EXPECT_GT(diff, 1e-3);
  }
}

// lora_linear (leantrain/ops_lora.h), the op LoraLinear and the stacked q | k | v run: the
// adapters' products added in GEMM epilogues equal the composition linear + scale + concat + add,
// forward and every gradient (f64), for one adapter and for three over column blocks with a
// bias; finite differences agree; bad factors are refused in one line.
TEST(LoraLinearOp, EqualsTheCompositionAndGradchecks) {
  const int64_t rows = 5, in = 6;
  using V = std::vector<Tensor>;
  auto composed = [](const V& p, const std::vector<int64_t>& ranks, const std::vector<double>& s) {
    // p: x, w, bias, then a_i, b_i
    Tensor y = linear(p[0], p[1], p[2]);
    std::vector<Tensor> ups;
    for (size_t i = 0; i < ranks.size(); ++i)
      ups.push_back(matmul(mul(matmul(p[0], p[3 + 2 * i], false, true), full({1}, s[i], DType::F64)), p[4 + 2 * i], false, true));
    return add(y, ups.size() == 1 ? ups[0] : concat(ups, -1));
  };
  auto fused = [](const V& p, const std::vector<double>& s) {
    std::vector<LoraFactors> f;
    for (size_t i = 0; i < s.size(); ++i) f.push_back({p[3 + 2 * i], p[4 + 2 * i], s[i]});
    return lora_linear(p[0], p[1], p[2], f);
  };
  struct Case {
    std::vector<int64_t> outs, ranks;
    std::vector<double> s;
    bool bias;
  };
  for (const Case& c : {Case{{7}, {2}, {2.0}, false}, Case{{4, 3, 3}, {2, 1, 3}, {2.0, 0.5, 4.0}, true}}) {
    int64_t outf = 0;
    for (int64_t o : c.outs) outf += o;
    V p = {test::rand64({rows, in}, 1), test::rand64({outf, in}, 2), c.bias ? test::rand64({outf}, 3) : Tensor()};
    for (size_t i = 0; i < c.outs.size(); ++i)
      p.push_back(test::rand64({c.ranks[i], in}, 10 + i)), p.push_back(test::rand64({c.outs[i], c.ranks[i]}, 20 + i));
    auto grads_of = [&](auto&& f) {
      V q;
      for (const Tensor& t : p) {
        Tensor u = t.defined() ? t.detach() : Tensor();
        if (u.defined()) u.set_requires_grad(true);
        q.push_back(u);
      }
      Tensor y = f(q);
      sum_all(mul(y, test::rand64(y.shape(), 99))).backward();
      std::vector<double> out = y.to_double_vector();
      for (const Tensor& t : q)
        if (t.defined())
          for (double v : t.grad().to_double_vector()) out.push_back(v);
      return out;
    };
    const std::vector<double> want = grads_of([&](const V& q) { return composed(q, c.ranks, c.s); });
    const std::vector<double> got = grads_of([&](const V& q) { return fused(q, c.s); });
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << i;
    V defined;
    for (const Tensor& t : p)
      if (t.defined()) defined.push_back(t);
    EXPECT_TRUE(test::gradcheck(
        [&](const V& q) {
          V full_args = {q[0], q[1], c.bias ? q[2] : Tensor()};
          for (size_t i = c.bias ? 3 : 2; i < q.size(); ++i) full_args.push_back(q[i]);
          return fused(full_args, c.s);
        },
        defined));
  }
  // Adapters that do not cover the output, or a factor of the wrong width: one line each.
  const Tensor x = test::rand64({rows, in}, 1), w = test::rand64({7, in}, 2);
  const std::string short_cols = error_of([&] {
    lora_linear(x, w, Tensor(), {{test::rand64({2, in}, 3), test::rand64({5, 2}, 4), 1.0}});
  });
  EXPECT_NE(short_cols.find("adapters over 5 output columns"), std::string::npos) << short_cols;
  EXPECT_EQ(short_cols.find('\n'), std::string::npos);
  const std::string wide = error_of([&] {
    lora_linear(x, w, Tensor(), {{test::rand64({2, in + 1}, 3), test::rand64({7, 2}, 4), 1.0}});
  });
  EXPECT_NE(wide.find("adapter factors"), std::string::npos) << wide;
}

TEST(Lora, ZeroBLeavesTheBaseOutput) {
  LoraFixture f(nn::WeightLayout::OutIn);
  Tensor x = test::rand64({3, 6}, 5);
  NoGradGuard ng;
  expect_close(f.lora->forward(x), f.base->forward(x), 0.0);
}

TEST(Lora, GradientsOfAdaptersAndInputMatchFiniteDifferences) {
  for (auto layout : {nn::WeightLayout::OutIn, nn::WeightLayout::InOut}) {
    LoraFixture f(layout);
    f.randomize_b();
    Tensor x = test::rand64({2, 3, 6}, 21);
    auto fn = [&](const std::vector<Tensor>& in) { return f.lora->forward(in[0]); };
    EXPECT_TRUE(test::gradcheck(fn, {x, f.lora->lora_A(), f.lora->lora_B()}));
  }
}

TEST(Lora, FrozenBaseGetsNoGradient) {
  LoraFixture f(nn::WeightLayout::OutIn);
  f.randomize_b();
  EXPECT_FALSE(f.base->weight().requires_grad());
  EXPECT_FALSE(f.base->bias().requires_grad());
  Tensor x = test::rand64({4, 6}, 9);
  x.set_requires_grad(false);
  sum_all(f.lora->forward(x)).backward();
  EXPECT_FALSE(f.base->weight().grad().defined());
  EXPECT_FALSE(f.base->bias().grad().defined());
  EXPECT_TRUE(f.lora->lora_A().grad().defined());
  EXPECT_TRUE(f.lora->lora_B().grad().defined());
}

TEST(Lora, InitIsPeftKaimingUniformAndZero) {
  LoraFixture f(nn::WeightLayout::OutIn, 64, 32, {8, 16, 0});
  const double bound = 1.0 / std::sqrt(64.0);
  double lo = 1, hi = -1;
  for (double v : f.lora->lora_A().to_double_vector()) lo = std::min(lo, v), hi = std::max(hi, v);
  EXPECT_GE(lo, -bound);
  EXPECT_LT(hi, bound);
  EXPECT_LT(lo, -0.8 * bound);  // drawn over the whole range, not a narrower one
  EXPECT_GT(hi, 0.8 * bound);
  for (double v : f.lora->lora_B().to_double_vector()) EXPECT_EQ(v, 0.0);
  EXPECT_EQ(f.lora->lora_A().shape(), (Shape{8, 64}));
  EXPECT_EQ(f.lora->lora_B().shape(), (Shape{32, 8}));
  EXPECT_DOUBLE_EQ(f.lora->scaling(), 2.0);
}

TEST(Lora, MergedWeightGivesTheSameOutput) {
  for (auto layout : {nn::WeightLayout::OutIn, nn::WeightLayout::InOut}) {
    LoraFixture f(layout);
    f.randomize_b();
    Tensor x = test::rand64({5, 6}, 31);
    NoGradGuard ng;
    Tensor merged = nn::lora_merged_weight(*f.lora);
    EXPECT_EQ(merged.shape(), f.base->weight().shape());
    // merged in f32: f32 rounding of values of order 1
    expect_close(linear(x, cast(merged, DType::F64), f.base->bias(), layout == nn::WeightLayout::InOut),
                 f.lora->forward(x), 1e-5);
  }
}

TEST(Lora, RefusesBadRankAndNonLinearBase) {
  nn::ParamFactory pf(nn::InitOptions{.flat = false});
  auto base = std::make_shared<nn::Linear>(pf, 4, 3);
  EXPECT_NE(error_of([&] { nn::LoraLinear(base, {4, 8, 0}, pf); }).find("rank must be in [1, min(in, out)]"), std::string::npos);
  EXPECT_NE(error_of([&] { nn::LoraLinear(base, {0, 8, 0}, pf); }).find("rank"), std::string::npos);
  auto gelu = std::make_shared<nn::Gelu>(GeluApprox::Tanh);
  EXPECT_NE(error_of([&] { nn::LoraLinear(gelu, {1, 8, 0}, pf); }).find("wraps a linear layer"), std::string::npos);
}

// ---- on a model

RunConfig lora_run(int64_t rank, const std::string& targets = "") {
  RunConfig c;
  c.lora_rank = rank;
  c.lora_targets = targets;
  return c;
}

TEST(LoraModel, GptKeepsHfNamesAndTrainsOnlyAdapters) {
  models::GPT2 m(test::small_gpt2(), {.seed = 1});
  const int64_t base_params = m.num_parameters();
  const std::string line = apply_lora(m, lora_run(4));
  EXPECT_NE(line.find("on 8 linear layers (c_attn, c_proj, c_fc)"), std::string::npos) << line;
  std::vector<std::string> names;
  for (auto& [n, t] : m.named_parameters()) names.push_back(n);
  auto has = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  EXPECT_TRUE(has("transformer.h.0.attn.c_attn.weight"));
  EXPECT_TRUE(has("transformer.h.0.attn.c_attn.bias"));
  EXPECT_TRUE(has("transformer.h.0.attn.c_attn.lora_A.weight"));
  EXPECT_TRUE(has("transformer.h.1.mlp.c_proj.lora_B.weight"));
  EXPECT_FALSE(has("transformer.h.0.attn.c_attn.base_layer.weight"));
  int64_t adapter = 0;
  for (auto& [n, t] : m.named_trainable_parameters()) {
    EXPECT_NE(n.find(".lora_"), std::string::npos) << n << " should be frozen";
    adapter += t.numel();
  }
  // c_attn 32->96, attn.c_proj 32->32, c_fc 32->128, mlp.c_proj 128->32; r 4; 2 layers
  EXPECT_EQ(adapter, 2 * 4 * ((32 + 96) + (32 + 32) + (32 + 128) + (128 + 32)));
  EXPECT_EQ(m.num_parameters(), base_params + adapter);
  // Conv1D: A [r, in], B [out, r], as PEFT saves for fan_in_fan_out
  EXPECT_EQ(m.parameter("transformer.h.0.attn.c_attn.lora_A.weight").shape(), (Shape{4, 32}));
  EXPECT_EQ(m.parameter("transformer.h.0.attn.c_attn.lora_B.weight").shape(), (Shape{96, 4}));
}

TEST(LoraModel, ViTDefaultsAdaptBlockLinearsAndTrainTheHead) {
  models::ViT m(test::small_vit(), {.seed = 1});
  apply_lora(m, lora_run(2));
  std::vector<std::string> trainable;
  for (auto& [n, t] : m.named_trainable_parameters()) trainable.push_back(n);
  auto has = [&](const std::string& n) { return std::find(trainable.begin(), trainable.end(), n) != trainable.end(); };
  EXPECT_TRUE(has("encoder.layers.encoder_layer_0.self_attention.out_proj.lora_A.weight"));
  EXPECT_TRUE(has("encoder.layers.encoder_layer_1.mlp.3.lora_B.weight"));
  EXPECT_TRUE(has("heads.head.weight"));
  EXPECT_TRUE(has("heads.head.bias"));
  EXPECT_FALSE(has("heads.head.lora_A.weight"));
  EXPECT_EQ(trainable.size(), size_t(2 * 3 * 2 + 2));
}

// A ViT adapter names its modules as transformers 5 does (which PEFT matches against there); one
// under transformers 4's names (PEFT on transformers 4, leantrain before) loads to the same values.
TEST(LoraModel, ViTAdapterUsesTransformers5NamesAndReadsLegacyOnes) {
  const auto tmp = std::filesystem::temp_directory_path();
  const std::string dir = (tmp / "lt-lora-unit-vit").string(), legacy = (tmp / "lt-lora-unit-vit-legacy").string();
  for (const std::string& d : {dir, legacy}) {
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
  }
  models::ViT m(test::small_vit(), {.seed = 1});
  apply_lora(m, lora_run(2));
  {
    NoGradGuard ng;
    Generator g(5);
    for (auto& [path, l] : lora_modules(m)) copy_(l->lora_B(), randn(l->lora_B().shape(), g, 0.1f));
  }
  write_lora_adapter(dir, m, "vit-small");
  io::PeftAdapterConfig c = io::read_peft_adapter_config(dir);
  EXPECT_EQ(c.target_modules, (std::vector<std::string>{"o_proj", "fc1", "fc2"}));
  EXPECT_EQ(c.modules_to_save, (std::vector<std::string>{"classifier"}));
  const std::map<std::string, Tensor> t = io::load_safetensors(dir + "/adapter_model.safetensors");
  EXPECT_TRUE(t.count("base_model.model.vit.layers.0.attention.o_proj.lora_A.weight"));
  EXPECT_TRUE(t.count("base_model.model.vit.layers.1.mlp.fc1.lora_B.weight"));
  EXPECT_TRUE(t.count("base_model.model.vit.layers.1.mlp.fc2.lora_A.weight"));
  EXPECT_TRUE(t.count("base_model.model.classifier.weight"));
  EXPECT_EQ(t.size(), size_t(2 * 3 * 2 + 2));

  // The same adapter under transformers 4's names.
  static const std::regex v5(R"(^base_model\.model\.vit\.layers\.(\d+)\.(attention\.o_proj|mlp\.fc1|mlp\.fc2)(\..*)$)");
  const std::map<std::string, std::string> old_name = {
      {"attention.o_proj", "attention.output.dense"}, {"mlp.fc1", "intermediate.dense"}, {"mlp.fc2", "output.dense"}};
  std::vector<std::pair<std::string, Tensor>> renamed;
  for (const auto& [k, v] : t) {
    std::smatch sm;
    renamed.emplace_back(std::regex_match(k, sm, v5) ? "base_model.model.vit.encoder.layer." + sm[1].str() + "." +
                                                           old_name.at(sm[2].str()) + sm[3].str()
                                                     : k,
                         v);
  }
  EXPECT_EQ(std::count_if(renamed.begin(), renamed.end(), [](const auto& kv) { return kv.first.find(".dense.lora_") != std::string::npos; }),
            2 * 3 * 2);
  io::save_safetensors(legacy + "/adapter_model.safetensors", renamed, {{"format", "pt"}});
  c.target_modules = {"dense"};
  std::ofstream(legacy + "/adapter_config.json") << io::peft_adapter_config_json(c);

  for (const std::string& d : {dir, legacy}) {
    models::ViT fresh(test::small_vit(), {.seed = 2});
    attach_peft_adapter(fresh, d);
    const auto a = lora_modules(m), b = lora_modules(fresh);
    ASSERT_EQ(a.size(), b.size()) << d;
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].first, b[i].first) << d;
      EXPECT_EQ(a[i].second->lora_B().to_double_vector(), b[i].second->lora_B().to_double_vector()) << d;
      EXPECT_EQ(a[i].second->lora_A().to_double_vector(), b[i].second->lora_A().to_double_vector()) << d;
    }
    EXPECT_EQ(m.parameter("heads.head.weight").to_double_vector(), fresh.parameter("heads.head.weight").to_double_vector());
  }
  for (const std::string& d : {dir, legacy}) std::filesystem::remove_all(d);
}

TEST(LoraModel, TargetsRegexAndItsRefusals) {
  {
    models::GPT2 m(test::small_gpt2(), {.seed = 1});
    apply_lora(m, lora_run(2, R"(transformer\.h\.0\.attn\.c_attn)"));
    EXPECT_EQ(lora_modules(m).size(), 1u);
  }
  auto err = [](const RunConfig& c) {
    models::GPT2 m(test::small_gpt2(), {.seed = 1});
    return error_of([&] { apply_lora(m, c); });
  };
  EXPECT_NE(err(lora_run(2, "q_proj")).find("--lora-targets 'q_proj' matches no module"), std::string::npos);
  EXPECT_NE(err(lora_run(2, R"(transformer\.h\.0\.attn)")).find("matches transformer.h.0.attn (a GPT2Attention)"),
            std::string::npos);
  EXPECT_NE(err(lora_run(2, "(")).find("is not a valid regular expression"), std::string::npos);
  EXPECT_NE(err(lora_run(33)).find("--lora-rank 33: transformer.h.0.attn.c_attn maps 32 -> 96 features"),
            std::string::npos);
}

TEST(LoraModel, MergeFoldsAdaptersAndRestoresThePlainModel) {
  models::GPT2 m(test::small_gpt2(), {.seed = 1});
  apply_lora(m, lora_run(4));
  {
    NoGradGuard ng;
    Generator g(5);
    for (auto& [path, l] : lora_modules(m)) copy_(l->lora_B(), randn(l->lora_B().shape(), g, 0.1f));
  }
  Tensor ids = from_ints({1, 5, 9, 3, 7, 2}, {1, 6});
  NoGradGuard ng;
  m.eval();
  const auto with_lora = m.forward(ids).to_double_vector();
  merge_lora(m);
  EXPECT_TRUE(lora_modules(m).empty());
  for (auto& [n, t] : m.named_parameters()) EXPECT_EQ(n.find("lora_"), std::string::npos) << n;
  const auto merged = m.forward(ids).to_double_vector();
  ASSERT_EQ(with_lora.size(), merged.size());
  for (size_t i = 0; i < merged.size(); ++i) EXPECT_NEAR(merged[i], with_lora[i], 1e-4);
}

// LLaMA keeps one GEMM over q|k|v and gate|up when each is an adapter on a plain Linear, and adds
// the updates after it: the same logits and adapter gradients as calling every module on its own
// (which a forward wrapper on an adapter forces).
TEST(LoraModel, LlamaFusedProjectionsEqualPerModuleCalls) {
  models::LlamaConfig c = models::LlamaConfig::defaults("llama");
  c.vocab_size = 40, c.hidden_size = 16, c.intermediate_size = 24, c.num_hidden_layers = 2;
  c.num_attention_heads = 4, c.num_key_value_heads = 2, c.max_position_embeddings = 64;
  Tensor ids = from_ints({1, 5, 9, 3, 7, 2, 30, 11}, {2, 4});
  auto run = [&](bool unfused) {
    models::Llama m(c, {.dtype = DType::F64, .seed = 3});
    install_lora(m, default_lora_targets(m), {2, 8, 0}, 1, DType::F64);
    {
      NoGradGuard ng;
      Generator g(5);
      for (auto& [path, l] : lora_modules(m)) copy_(l->lora_B(), randn(l->lora_B().shape(), g, 0.5f, DType::F64));
    }
    if (unfused)
      for (auto& [path, l] : lora_modules(m))
        l->set_forward_wrapper([](nn::Module&, const Tensor& x, const nn::Module::ForwardFn& f) { return f(x); });
    Tensor logits = m.forward(ids);
    sum_all(logits).backward();
    std::vector<double> out = logits.to_double_vector();
    for (auto& [n, p] : m.named_trainable_parameters())
      for (double g : p.grad().to_double_vector()) out.push_back(g);
    return out;
  };
  const std::vector<double> fused = run(false), called = run(true);
  ASSERT_EQ(fused.size(), called.size());
  for (size_t i = 0; i < fused.size(); ++i) EXPECT_NEAR(fused[i], called[i], 1e-10) << i;
}

// adapter_config.json's target_modules select exactly the adapted layers under PEFT's suffix rule,
// and a fresh model given the adapter directory gets the same adapters with the same values.
TEST(LoraModel, AdapterDirectoryRoundTripsTheTargets) {
  const std::string dir = (std::filesystem::temp_directory_path() / "lt-lora-unit-adapter").string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  for (const auto& [targets, names] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"", {"c_attn", "c_proj", "c_fc"}},
           {R"(.*\.attn\.c_proj)", {"attn.c_proj"}},
           {R"(transformer\.h\.1\.mlp\.c_fc|.*\.attn\.c_attn)", {"c_attn", "1.mlp.c_fc"}}}) {
    models::GPT2 m(test::small_gpt2(), {.seed = 1});
    apply_lora(m, lora_run(2, targets));
    {
      NoGradGuard ng;
      Generator g(5);
      for (auto& [path, l] : lora_modules(m)) copy_(l->lora_B(), randn(l->lora_B().shape(), g, 0.1f));
    }
    write_lora_adapter(dir, m, "gpt2-small");
    const io::PeftAdapterConfig c = io::read_peft_adapter_config(dir);
    EXPECT_EQ(c.target_modules, names) << targets;
    EXPECT_TRUE(c.fan_in_fan_out);
    EXPECT_EQ(c.task_type, "CAUSAL_LM");
    models::GPT2 fresh(test::small_gpt2(), {.seed = 2});
    attach_peft_adapter(fresh, dir);
    const auto a = lora_modules(m), b = lora_modules(fresh);
    ASSERT_EQ(a.size(), b.size()) << targets;
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].first, b[i].first);
      EXPECT_EQ(a[i].second->lora_B().to_double_vector(), b[i].second->lora_B().to_double_vector());
      EXPECT_EQ(a[i].second->lora_A().to_double_vector(), b[i].second->lora_A().to_double_vector());
    }
  }
  std::filesystem::remove_all(dir);
}

// The command a plan prints (--budget, an OOM's advice) keeps the adapters.
TEST(LoraModel, PlanCommandLineKeepsTheLoraFlags) {
  RunConfig c = lora_run(16, R"(.*\.(q_proj|v_proj))");
  c.lora_alpha = 32;
  c.lora_dropout = 0.05;
  const std::string cmd = command_line(c);
  for (const char* part : {" --lora-rank 16", " --lora-alpha 32", " --lora-dropout 0.05", " --lora-targets '.*\\.(q_proj|v_proj)'"})
    EXPECT_NE(cmd.find(part), std::string::npos) << part << " in " << cmd;
  EXPECT_EQ(command_line(RunConfig{}).find("--lora"), std::string::npos);
}

}  // namespace
}  // namespace lt
