// NF4 experts (QLoRA on mixture-of-experts models, issue 45) on the CPU: a stack's pieces are each
// their own bitsandbytes state (the codes of quantising that projection alone); the grouped NF4
// GEMMs, forward and backward, equal grouped_linear on the dequantised f32 stack bit for bit, for
// any group size; LoRA around NF4 experts has the gradients of LoRA around the dequantised
// 16-bit experts; --quantize nf4 quantises the experts of the tiny presets from the plain build's
// values (or a 16-bit directory in either layout), saves them as bitsandbytes' per-expert tensors
// that load back bit-identical; and the plan of a QLoRA run on them is the CPU run's peak.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <random>

#include "error_of.h"
#include "io/weight_files.h"
#include "io/weight_save.h"
#include "leantrain/autograd.h"
#include "leantrain/nn_moe.h"
#include "leantrain/plan.h"
#include "leantrain/train.h"
#include "models/llama.h"
#include "quant/nf4_checkpoint.h"
#include "train/checkpoint_weights.h"
#include "train/lora_setup.h"
#include "train/quantize_setup.h"

using namespace lt;
using lt::test::error_of;
namespace fs = std::filesystem;

namespace {

std::vector<float> normal(size_t n, uint64_t seed, float std) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, std);
  std::vector<float> x(n);
  for (float& v : x) v = d(rng);
  return x;
}

std::vector<float> values(const Tensor& t) {
  const Tensor f = contiguous(cast(t, DType::F32));
  return std::vector<float>(f.data<float>(), f.data<float>() + f.numel());
}

std::vector<uint8_t> bytes(const Tensor& t) {
  const Tensor c = contiguous(t);
  return std::vector<uint8_t>(c.data<uint8_t>(), c.data<uint8_t>() + c.numel());
}

// A stack of `shape` in `parts`, its state allocated and every piece quantised from w.
Nf4Stack quantised_stack(const Tensor& w, int64_t parts) {
  Nf4Stack s;
  s.shape = w.shape();
  s.parts = parts;
  const Nf4StackShapes sh = nf4_stack_shapes(s.shape, parts);
  s.codes = empty(sh.codes, DType::U8);
  s.absmax_codes = empty(sh.absmax_codes, DType::U8);
  s.nested_absmax = empty(sh.nested_absmax, DType::F32);
  const Tensor rows = reshape(w, {s.pieces(), s.piece_numel()});
  for (int64_t p = 0; p < s.pieces(); ++p) nf4_stack_quantize_piece(reshape(select(rows, 0, p), s.piece_shape()), s, p);
  return s;
}

// Sets LEANTRAIN_NF4_EXPERT_GROUP for the scope (0: unset).
class GroupKnob {
 public:
  explicit GroupKnob(int64_t g) {
    if (g > 0) ::setenv("LEANTRAIN_NF4_EXPERT_GROUP", std::to_string(g).c_str(), 1);
    else ::unsetenv("LEANTRAIN_NF4_EXPERT_GROUP");
  }
  ~GroupKnob() { ::unsetenv("LEANTRAIN_NF4_EXPERT_GROUP"); }
};

MoeDispatch dispatch(int64_t n, int64_t k, int64_t e, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> idx;
  for (int64_t t = 0; t < n; ++t) {
    std::vector<int64_t> all(static_cast<size_t>(e));
    for (int64_t x = 0; x < e; ++x) all[size_t(x)] = x;
    std::shuffle(all.begin(), all.end(), rng);
    for (int64_t j = 0; j < k; ++j) idx.push_back(all[size_t(j)]);
  }
  return moe_dispatch(from_ints(idx, {n, k}, DType::I32), e);
}

Tensor leaf(const Shape& s, uint64_t seed, float std = 1.0f) {
  Tensor t = from_vector(normal(size_t(numel(s)), seed, std), s);
  t.set_requires_grad(true);
  return t;
}

}  // namespace

TEST(MoeNf4Stack, EachPieceIsThatProjectionsOwnState) {
  const int64_t E = 3, F = 40, C = 48;  // pieces of 1920 values: 30 blocks, one partial nested block
  const Tensor w = from_vector(normal(size_t(E * 2 * F * C), 1, 0.05f), {E, 2 * F, C});
  const Nf4Stack s = quantised_stack(w, 2);
  EXPECT_EQ(s.pieces(), 6);
  EXPECT_EQ(s.codes.shape(), (Shape{6, F * C / 2}));
  const Tensor rows = reshape(w, {E * 2, F * C});
  for (int64_t p = 0; p < s.pieces(); ++p) {
    const Nf4Weight want = nf4_quantize(reshape(select(rows, 0, p), {F, C}));
    const Nf4Weight got = s.piece(p);
    EXPECT_EQ(got.shape, (Shape{F, C}));
    EXPECT_EQ(bytes(got.codes), bytes(want.codes)) << p;
    EXPECT_EQ(bytes(got.absmax_codes), bytes(want.absmax_codes)) << p;
    EXPECT_EQ(values(got.nested_absmax), values(want.nested_absmax)) << p;
    EXPECT_EQ(got.offset, want.offset) << p;
    EXPECT_EQ(values(nf4_dequantize(got, DType::F32)), values(nf4_dequantize(want, DType::F32))) << p;
  }
  // The whole stack and any run of experts dequantise to the pieces' values.
  const Tensor all = nf4_stack_dequantize(s, DType::F32);
  EXPECT_EQ(all.shape(), w.shape());
  for (DType dt : {DType::F32, DType::BF16}) {
    const Tensor mid = empty({2, 2 * F, C}, dt);
    nf4_stack_dequantize_into(s, 1, 2, mid);
    EXPECT_EQ(values(mid), values(cast(slice(nf4_stack_dequantize(s, dt), 0, 1, 3), DType::F32))) << dtype_name(dt);
  }
  const Tensor dq = reshape(all, {E * 2, F * C});
  for (int64_t p = 0; p < s.pieces(); ++p)
    EXPECT_EQ(values(select(dq, 0, p)), values(reshape(nf4_dequantize(s.piece(p), DType::F32), {F * C}))) << p;
  EXPECT_NE(error_of([] { (void)nf4_stack_shapes({4, 5, 6}, 2); }).find("a multiple of the parts"), std::string::npos);
}

// The NF4 ops against grouped_linear / grouped_swiglu_linear on the dequantised f32 stack: the
// same kernels on the same rows, so the same bits, with one expert a group, a group that does not
// divide the experts, and all of them; experts no token chose included.
TEST(MoeNf4Ops, GroupedNf4EqualsTheDequantisedReference) {
  const int64_t N = 9, k = 2, E = 5, C = 16, F = 8;
  const MoeDispatch d = dispatch(N, k, E, 3);
  const MoeDispatch sparse = dispatch(2, 1, E, 4);  // 2 rows over 5 experts
  const Nf4Stack gu = quantised_stack(from_vector(normal(size_t(E * 2 * F * C), 5, 0.1f), {E, 2 * F, C}), 2);
  const Nf4Stack dn = quantised_stack(from_vector(normal(size_t(E * C * F), 6, 0.1f), {E, C, F}), 1);
  const Tensor gu_ref = nf4_stack_dequantize(gu, DType::F32), dn_ref = nf4_stack_dequantize(dn, DType::F32);
  for (int64_t group : {int64_t(1), int64_t(2), int64_t(0)}) {
    GroupKnob knob(group);
    EXPECT_EQ(nf4_expert_group(gu, DType::F32), group > 0 ? group : E);
    for (const MoeDispatch* dd : {&d, &sparse}) {
      const int64_t R = dd->tokens * dd->k;
      Tensor x1 = leaf({R, C}, 7), x2 = leaf({R, C}, 7);
      Tensor y1 = grouped_linear_nf4(x1, gu, *dd), y2 = grouped_linear(x2, gu_ref, *dd);
      EXPECT_EQ(values(y1), values(y2)) << group;
      const Tensor g = from_vector(normal(size_t(R * 2 * F), 8, 1.0f), {R, 2 * F});
      y1.backward(g);
      y2.backward(g);
      EXPECT_EQ(values(x1.grad()), values(x2.grad())) << group;
      Tensor a1 = leaf({R, 2 * F}, 9), a2 = leaf({R, 2 * F}, 9);
      Tensor z1 = grouped_swiglu_linear_nf4(a1, dn, *dd), z2 = grouped_swiglu_linear(a2, dn_ref, *dd);
      EXPECT_EQ(values(z1), values(z2)) << group;
      const Tensor h = from_vector(normal(size_t(R * C), 10, 1.0f), {R, C});
      z1.backward(h);
      z2.backward(h);
      EXPECT_EQ(values(a1.grad()), values(a2.grad())) << group;
    }
  }
  // Wrong shapes are named.
  EXPECT_NE(error_of([&] { grouped_linear_nf4(leaf({N * k, C + 1}, 1), gu, d); }).find("grouped_linear_nf4"),
            std::string::npos);
}

// LoRA around NF4 experts: the output and every gradient (rows and both adapters of both
// projections) are those of the same adapters around 16-bit experts holding the dequantised
// weights (whose adapter gradients test_moe.cpp checks by finite differences), for a group size
// that splits the experts.
TEST(MoeNf4Lora, AdaptersAroundNf4ExpertsHaveTheDequantisedExpertsGradients) {
  GroupKnob knob(3);
  const int64_t N = 8, k = 2, E = 4, C = 16, F = 8, r = 2;
  nn::MoeOptions o;
  o.hidden = C, o.intermediate = F, o.experts = E, o.top_k = k;
  nn::ParamFactory pf(nn::InitOptions{.dtype = DType::F32, .seed = 4});
  nn::MoeExperts dense(pf, o);
  pf.materialize();
  const Nf4Stack gu = quantised_stack(from_vector(normal(size_t(E * 2 * F * C), 5, 0.1f), {E, 2 * F, C}), 2);
  const Nf4Stack dn = quantised_stack(from_vector(normal(size_t(E * C * F), 6, 0.1f), {E, C, F}), 1);
  nn::MoeExperts quant("Qwen3MoeExperts", gu, dn);
  EXPECT_TRUE(quant.quantized());
  EXPECT_EQ(quant.num_experts(), E);
  EXPECT_EQ(quant.intermediate(), F);
  EXPECT_NE(error_of([&] { (void)quant.gate_up_proj(); }).find("NF4"), std::string::npos);
  {
    NoGradGuard ng;
    copy_(dense.gate_up_proj(), nf4_stack_dequantize(gu, DType::F32));
    copy_(dense.down_proj(), nf4_stack_dequantize(dn, DType::F32));
  }
  for (nn::MoeExperts* m : {&dense, &quant}) {
    nn::ParamFactory lf(nn::InitOptions{.dtype = DType::F32, .seed = 5});
    m->add_lora(lf, r, 4.0);
    lf.materialize();
    Generator gen(9);  // lora_B starts at zero: random values so that the update shows
    NoGradGuard ng;
    for (auto& [n, p] : m->named_trainable_parameters()) copy_(p, randn(p.shape(), gen, 0.3f, p.dtype()));
  }
  const MoeDispatch d = dispatch(N, k, E, 11);
  Tensor x1 = leaf({N * k, C}, 12), x2 = leaf({N * k, C}, 12);
  Tensor y1 = dense.run(x1, d), y2 = quant.run(x2, d);
  EXPECT_EQ(values(y1), values(y2));
  const Tensor g = from_vector(normal(size_t(N * k * C), 13, 1.0f), {N * k, C});
  y1.backward(g);
  y2.backward(g);
  EXPECT_EQ(values(x1.grad()), values(x2.grad()));
  const auto a = dense.named_trainable_parameters(), b = quant.named_trainable_parameters();
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_EQ(values(a[i].second.grad()), values(b[i].second.grad())) << a[i].first;
  }
  EXPECT_NE(error_of([&] { quant.merge_lora(); }).find("merging LoRA into NF4 experts"), std::string::npos);
  // No NF4 state is trainable.
  for (auto& [n, t] : quant.named_buffers()) EXPECT_FALSE(t.requires_grad()) << n;
}

// --quantize nf4 on the tiny MoE presets: every experts module is NF4 with the codes of
// quantising the plain build's projections one by one; the model's logits are those of the plain
// model holding the dequantised weights (experts and linear layers alike).
TEST(MoeNf4Model, QuantisedPresetsHoldThePlainBuildsCodes) {
  for (const char* preset : {"qwen3-moe-tiny", "mixtral-tiny"}) {
    nn::InitOptions init;
    init.dtype = DType::F32;
    init.seed = 7;
    const auto cfg = models::config_from_preset(preset);
    const QuantizedModel q = build_nf4_model(*cfg, init, "");
    const auto plain = models::create_model(preset, init);
    const auto experts = nf4_experts(*q.model);
    EXPECT_EQ(q.expert_layers, int64_t(experts.size())) << preset;
    EXPECT_EQ(experts.size(), 2u) << preset;  // qwen3-moe-tiny: layer 1 is dense (mlp_only_layers)
    for (const auto& [path, e] : experts) {
      for (bool gate_up : {true, false}) {
        const Nf4Stack s = gate_up ? e->gate_up_nf4() : e->down_nf4();
        const Tensor w = plain->parameter(path + (gate_up ? ".gate_up_proj" : ".down_proj"));
        const Nf4Stack want = quantised_stack(w, gate_up ? 2 : 1);
        EXPECT_EQ(bytes(s.codes), bytes(want.codes)) << preset << " " << path;
        EXPECT_EQ(bytes(s.absmax_codes), bytes(want.absmax_codes)) << preset << " " << path;
        EXPECT_EQ(values(s.nested_absmax), values(want.nested_absmax)) << preset << " " << path;
        EXPECT_EQ(s.offsets, want.offsets) << preset << " " << path;
      }
    }
    // The plain model with the dequantised weights computes the same logits.
    {
      NoGradGuard ng;
      for (const auto& [path, e] : experts) {
        copy_(plain->parameter(path + ".gate_up_proj"), nf4_stack_dequantize(e->gate_up_nf4(), DType::F32));
        copy_(plain->parameter(path + ".down_proj"), nf4_stack_dequantize(e->down_nf4(), DType::F32));
      }
      for (const auto& [path, l] : nf4_layers(*q.model))
        copy_(plain->parameter(path + ".weight"), nf4_dequantize(l->state(), DType::F32));
    }
    const Tensor ids = from_ints({1, 5, 9, 200, 7, 3, 11, 40}, {2, 4});
    const std::vector<float> a = values(q.model->forward(ids)), b = values(plain->forward(ids));
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5f * (1 + std::abs(b[i]))) << preset << " [" << i << "]";
  }
}

// Saved as bitsandbytes' six tensors per expert projection under the hub's names, read back as
// they are (bit-identical state and logits); a 16-bit directory in the hub's layout or
// transformers 5's fused one quantises at load to the codes of the init-time quantisation.
TEST(MoeNf4Model, SaveLoadsBackAndSixteenBitDirectoriesQuantiseAtLoad) {
  for (const char* preset : {"qwen3-moe-tiny", "mixtral-tiny"}) {
    const bool mixtral = std::string(preset) == "mixtral-tiny";
    const fs::path dir = fs::temp_directory_path() / ("lt_moe_nf4_" + std::string(preset));
    fs::remove_all(dir);
    for (const char* sub : {"nf4", "hub", "fused"}) fs::create_directories(dir / sub);
    nn::InitOptions init;
    init.dtype = DType::BF16;
    init.seed = 7;
    const auto cfg = models::config_from_preset(preset);
    const QuantizedModel q = build_nf4_model(*cfg, init, "");
    save_model_weights((dir / "nf4").string(), *q.model, int64_t(1) << 40);
    {
      io::WeightFiles files((dir / "nf4").string());
      const std::string w = mixtral ? "model.layers.1.block_sparse_moe.experts.3.w3.weight"
                                    : "model.layers.0.mlp.experts.5.up_proj.weight";
      for (const char* suffix : {"", ".absmax", ".quant_map", ".nested_absmax", ".nested_quant_map",
                                 ".quant_state.bitsandbytes__nf4"})
        EXPECT_NE(files.find(w + suffix).file, nullptr) << preset << " " << suffix;
      EXPECT_EQ(files.find(w).entry->dtype, DType::U8);
      const auto e = dynamic_cast<models::Llama&>(*q.model).config();
      EXPECT_EQ(files.find(w).entry->shape, (Shape{e.expert_intermediate() * e.hidden_size / 2, 1}));
      for (const std::string& n : files.names()) EXPECT_EQ(n.find("gate_up_proj"), std::string::npos) << n;
    }
    nn::InitOptions blank = init;
    blank.fill = false;
    blank.seed = 99;
    const QuantizedModel back = build_nf4_model(*cfg, blank, "");
    load_model_weights((dir / "nf4").string(), *back.model);
    const auto ea = nf4_experts(*q.model), eb = nf4_experts(*back.model);
    ASSERT_EQ(ea.size(), eb.size());
    for (size_t i = 0; i < ea.size(); ++i)
      for (bool gate_up : {true, false}) {
        const Nf4Stack a = gate_up ? ea[i].second->gate_up_nf4() : ea[i].second->down_nf4();
        const Nf4Stack b = gate_up ? eb[i].second->gate_up_nf4() : eb[i].second->down_nf4();
        EXPECT_EQ(bytes(a.codes), bytes(b.codes));
        EXPECT_EQ(bytes(a.absmax_codes), bytes(b.absmax_codes));
        EXPECT_EQ(values(a.nested_absmax), values(b.nested_absmax));
        EXPECT_EQ(a.offsets, b.offsets);
        EXPECT_EQ(a.nested_map, b.nested_map);
        EXPECT_EQ(a.dtype, b.dtype);
      }
    const Tensor ids = from_ints({1, 5, 9, 200, 7, 3}, {1, 6});
    EXPECT_EQ(values(q.model->forward(ids)), values(back.model->forward(ids))) << preset;
    // 16-bit weights: the hub's per-expert tensors, and transformers 5's fused stacks.
    const auto plain = models::create_model(preset, init);
    save_model_weights((dir / "hub").string(), *plain, int64_t(1) << 40);
    std::vector<std::pair<std::string, Tensor>> fused;
    for (auto& [n, p] : plain->named_parameters()) fused.emplace_back(n, p);
    io::save_weight_files((dir / "fused").string(), fused, int64_t(1) << 40);
    for (const char* layout : {"hub", "fused"}) {
      const QuantizedModel l = build_nf4_model(*cfg, blank, (dir / layout).string());
      const auto el = nf4_experts(*l.model);
      ASSERT_EQ(el.size(), ea.size());
      for (size_t i = 0; i < el.size(); ++i) {
        EXPECT_EQ(bytes(el[i].second->gate_up_nf4().codes), bytes(ea[i].second->gate_up_nf4().codes)) << layout;
        EXPECT_EQ(el[i].second->down_nf4().offsets, ea[i].second->down_nf4().offsets) << layout;
      }
      EXPECT_EQ(values(l.model->forward(ids)), values(q.model->forward(ids))) << preset << " " << layout;
    }
    // NF4 experts refuse a 16-bit checkpoint as their state.
    EXPECT_NE(error_of([&] { load_model_weights((dir / "hub").string(), *back.model); })
                  .find("without a bitsandbytes 4-bit state"),
              std::string::npos);
    EXPECT_NE(error_of([&] { load_model_weights((dir / "fused").string(), *back.model); }).find("a floating stack of experts"),
              std::string::npos);
    fs::remove_all(dir);
  }
}

// The dry run predicts a QLoRA run on NF4 experts to the byte: the store, the adapters and each
// grouped GEMM's dequantised group (several groups a GEMM here).
TEST(MoeNf4Model, PlanOfAQloraRunIsTheCpuRunsPeak) {
  for (int64_t group : {int64_t(0), int64_t(3)})
    for (const char* checkpoint : {"none", "blocks"}) {
      GroupKnob knob(group);
      RunConfig c;
      c.model = "qwen3-moe-tiny";
      c.data = "synthetic";
      c.batch = 2;
      c.seq_len = 16;
      c.steps = 2;
      c.eval_batches = 1;
      c.device = "cpu";
      c.checkpoint = nn::parse_checkpoint_spec(checkpoint);
      c.precision = Precision::TrueBf16;
      c.quantize = QuantizeKind::Nf4;
      c.lora_rank = 4;
      c.lora_alpha = 8;
      PlanResult p = plan_run(c, PlanOptions{"cpu"});
      const int64_t before = allocator_for(Device::cpu()).stats().allocated_bytes.current;
      RunResult r = train(c);
      EXPECT_EQ(r.memory.allocated_bytes.peak - before, p.peak_allocated) << group << " " << checkpoint;
    }
}
