// Nf4Linear and --quantize nf4's build (train/quantize_setup.h): the module against linear() on
// its dequantised weight, the names and frozen buffers of a quantised model, codes equal to
// quantising the plain build's weights (Conv1D transposed), the build's peak on meta (the NF4
// store plus one layer's temporary, never the 16-bit model), the bitsandbytes save layout and a
// save/load round trip with bit-identical logits, and the plan of a quantised run to the byte.
#include <gtest/gtest.h>

#include "train/recipe_table.h"

#include <filesystem>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/nf4.h"
#include "error_of.h"
#include "io/weight_files.h"
#include "leantrain/memory.h"
#include "leantrain/nn_quant.h"
#include "leantrain/plan.h"
#include "leantrain/train.h"
#include "quant/nf4_checkpoint.h"
#include "quant/nf4_linear.h"
#include "train/checkpoint_weights.h"
#include "train/quantize_setup.h"

using namespace lt;
using lt::test::error_of;

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

QuantizedModel build(const std::string& preset, Device d, DType dt = DType::BF16, const std::string& dir = "") {
  nn::InitOptions init;
  init.device = d;
  init.dtype = dt;
  init.seed = 7;
  init.fill = dir.empty();
  return build_nf4_model(*models::config_from_preset(preset), init, dir);
}

}  // namespace

TEST(QuantNf4Module, ForwardIsLinearOnTheDequantisedWeightAndTheBiasTrains) {
  const Nf4Weight w = nf4_quantize(from_vector(normal(24 * 40, 1, 0.05f), {24, 40}, DType::F32));
  const Tensor wd = nf4_dequantize(w, DType::F32);
  Tensor bias = from_vector(normal(24, 2, 0.1f), {24}, DType::F32);
  bias.set_requires_grad(true);
  nn::Nf4Linear m(w, bias);
  EXPECT_STREQ(m.type_name(), "Linear4bit");
  EXPECT_EQ(m.in_features(), 40);
  EXPECT_EQ(m.out_features(), 24);
  const std::vector<float> xv = normal(3 * 40, 3, 1.0f);
  Tensor x1 = from_vector(xv, {3, 40}, DType::F32), x2 = from_vector(xv, {3, 40}, DType::F32);
  x1.set_requires_grad(true);
  x2.set_requires_grad(true);
  Tensor b2 = from_vector(normal(24, 2, 0.1f), {24}, DType::F32);
  b2.set_requires_grad(true);
  const Tensor y1 = m(x1), y2 = linear(x2, wd, b2);
  EXPECT_EQ(values(y1), values(y2));
  const Tensor dy = from_vector(normal(3 * 24, 4, 1.0f), {3, 24}, DType::F32);
  y1.backward(dy);
  y2.backward(dy);
  EXPECT_EQ(values(x1.grad()), values(x2.grad()));
  ASSERT_TRUE(m.bias().grad().defined());
  EXPECT_EQ(values(m.bias().grad()), values(b2.grad()));
  // The state is buffers: never trainable, named as bitsandbytes' tensors where a name can be.
  const auto buffers = m.named_buffers();
  ASSERT_EQ(buffers.size(), 3u);
  EXPECT_EQ(buffers[0].first, "weight");
  EXPECT_EQ(buffers[0].second.shape(), (Shape{480, 1}));
  EXPECT_EQ(buffers[1].first, "weight_absmax");
  EXPECT_EQ(buffers[2].first, "weight_nested_absmax");
  EXPECT_EQ(m.named_trainable_parameters().size(), 1u);  // the bias
  EXPECT_NE(error_of([&] { m.set_trainable("weight", true); }), "");
}

TEST(QuantNf4Module, QuantisedLlamaHasFrozenNf4LayersWithThePlainBuildsCodes) {
  const QuantizedModel q = build("llama-tiny", Device::cpu());
  nn::InitOptions init;
  init.dtype = DType::BF16;
  init.seed = 7;
  const auto plain = models::create_model("llama-tiny", init);
  EXPECT_EQ(q.layers, 14);  // 2 layers x q, k, v, o, gate, up, down
  EXPECT_EQ(nf4_target_paths(*plain).size(), 14u);
  for (const auto& [name, t] : q.model->named_trainable_parameters())
    EXPECT_TRUE(t.dtype() == DType::BF16) << name;  // embeddings, norms (and no NF4 buffer)
  for (const auto& [path, layer] : nf4_layers(*q.model)) {
    const Tensor w = plain->parameter(path + ".weight");
    const Nf4Weight want = nf4_quantize(w);
    const Nf4Weight got = layer->state();
    EXPECT_EQ(got.shape, w.shape()) << path;
    EXPECT_EQ(bytes(got.codes), bytes(want.codes)) << path;
    EXPECT_EQ(bytes(got.absmax_codes), bytes(want.absmax_codes)) << path;
    EXPECT_EQ(values(got.nested_absmax), values(want.nested_absmax)) << path;
    EXPECT_EQ(got.offset, want.offset) << path;
  }
  // Everything else holds the plain build's values.
  for (const auto& [name, t] : q.model->named_trainable_parameters())
    EXPECT_EQ(values(t), values(plain->parameter(name))) << name;
  // The module names of the reference, one NF4 layer per linear of the blocks.
  const auto buffers = q.model->named_buffers();
  bool found = false;
  for (const auto& [name, t] : buffers)
    if (name == "model.layers.1.mlp.down_proj.weight_absmax") found = true;
  EXPECT_TRUE(found);
}

TEST(QuantNf4Module, Gpt2Conv1DIsQuantisedAsTheTransposedLinear4bitWeight) {
  const QuantizedModel q = build("gpt2-tiny", Device::cpu(), DType::F32);
  nn::InitOptions init;
  init.seed = 7;
  const auto plain = models::create_model("gpt2-tiny", init);
  EXPECT_EQ(q.layers, 16);  // 4 blocks x c_attn, attn.c_proj, c_fc, mlp.c_proj
  const auto layers = nf4_layers(*q.model);
  ASSERT_FALSE(layers.empty());
  for (const auto& [path, layer] : layers) {
    const Tensor w = plain->parameter(path + ".weight");  // Conv1D: [in, out]
    const Nf4Weight want = nf4_quantize(contiguous(transpose(w, 0, 1)));
    EXPECT_EQ(layer->state().shape, (Shape{w.size(1), w.size(0)})) << path;
    EXPECT_EQ(bytes(layer->state().codes), bytes(want.codes)) << path;
    EXPECT_TRUE(q.model->parameter(path + ".bias").requires_grad()) << path;
  }
}

// Building Llama-3-8B's layout on meta: the device never holds the 16-bit model, only the store
// of what stays 16-bit, the NF4 store and one layer's temporaries (its 16-bit weight and the f32
// block absmax of its quantisation).
TEST(QuantNf4Module, MetaBuildPeakIsTheNf4ModelPlusOneLayer) {
  Allocator& a = allocator_for(Device::meta());
  const int64_t before = a.stats().allocated_bytes.current;
  a.reset_peak_stats();
  const QuantizedModel q = build("llama3-8b", Device::meta());
  const MemoryStats s = a.stats();
  int64_t stored = 0, nf4 = 0, layer = 0;
  for (const auto& [name, t] : q.model->named_parameters()) stored += nn::ParamFactory::flat_bytes(t.shape(), t.dtype());
  for (const auto& [name, t] : q.model->named_buffers()) nf4 += nn::ParamFactory::flat_bytes(t.shape(), t.dtype());
  for (const auto& [path, l] : nf4_layers(*q.model)) {
    const int64_t n = l->in_features() * l->out_features();
    layer = std::max(layer, round_allocation(n * 2) + round_allocation(nf4_blocks(n) * 4));
  }
  EXPECT_EQ(s.allocated_bytes.current - before, stored + nf4);
  EXPECT_EQ(s.allocated_bytes.peak - before, stored + nf4 + layer);
  // 0.5 byte per weight, one absmax byte per 64 and one f32 per 16384 (+ rounding of each view).
  EXPECT_LT(double(nf4), 7.0e9 * (0.5 + 1.0 / 64 + 4.0 / 16384) * 1.001);
  EXPECT_GT(double(nf4), 6.9e9 * (0.5 + 1.0 / 64));
  EXPECT_LT(double(s.allocated_bytes.peak - before), 6.0e9);  // a 16-bit 8B model is 16 GB
}

TEST(QuantNf4Module, SaveWritesBitsandbytesTensorsAndLoadsBackBitIdentical) {
  const auto dir = std::filesystem::temp_directory_path() / "lt_nf4_module_roundtrip";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const QuantizedModel q = build("llama-tiny", Device::cpu());
  save_model_weights(dir.string(), *q.model, int64_t(1) << 40);
  {
    io::WeightFiles files(dir.string());
    const std::string w = "model.layers.0.self_attn.q_proj.weight";
    for (const char* suffix : {"", ".absmax", ".quant_map", ".nested_absmax", ".nested_quant_map",
                               ".quant_state.bitsandbytes__nf4"})
      EXPECT_NE(files.find(w + suffix).file, nullptr) << suffix;
    EXPECT_EQ(files.find(w + "_absmax").file, nullptr);
    EXPECT_EQ(files.find(w).entry->shape, (Shape{64 * 64 / 2, 1}));
    EXPECT_EQ(files.find(w).entry->dtype, DType::U8);
  }
  // A fresh layout (no values drawn, nothing quantised) reads the state as it is.
  nn::InitOptions init;
  init.dtype = DType::BF16;
  init.seed = 99;
  init.fill = false;
  const QuantizedModel back = build_nf4_model(*models::config_from_preset("llama-tiny"), init, "");
  load_model_weights(dir.string(), *back.model);
  const Tensor ids = from_ints({1, 5, 9, 200, 7, 3}, {1, 6}, DType::I64, Device::cpu());
  EXPECT_EQ(values(q.model->forward(ids)), values(back.model->forward(ids)));
  const auto a = nf4_layers(*q.model), b = nf4_layers(*back.model);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].second->state().offset, b[i].second->state().offset);
    EXPECT_EQ(a[i].second->state().nested_map, b[i].second->state().nested_map);
  }
  // An unquantised model cannot take them, and a quantised one refuses 16-bit weights.
  const auto plain_dir = std::filesystem::temp_directory_path() / "lt_nf4_module_plain";
  std::filesystem::remove_all(plain_dir);
  std::filesystem::create_directories(plain_dir);
  nn::InitOptions pi;
  pi.dtype = DType::BF16;
  const auto plain = models::create_model("llama-tiny", pi);
  save_model_weights(plain_dir.string(), *plain, int64_t(1) << 40);
  EXPECT_NE(error_of([&] { load_model_weights(plain_dir.string(), *back.model); })
                .find("a floating weight without a bitsandbytes 4-bit state"),
            std::string::npos);
  // Quantising at load from the 16-bit directory gives the codes of quantising the plain weights.
  nn::InitOptions li = pi;
  li.fill = false;
  const QuantizedModel loaded = build_nf4_model(*models::config_from_preset("llama-tiny"), li, plain_dir.string());
  for (const auto& [path, layer] : nf4_layers(*loaded.model))
    EXPECT_EQ(bytes(layer->state().codes), bytes(nf4_quantize(plain->parameter(path + ".weight")).codes)) << path;
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(plain_dir);
}

TEST(QuantNf4Module, PlanOfAQuantisedRunIsTheCpuRunsPeak) {
  for (Precision precision : {Precision::True32, Precision::TrueBf16}) {
    RunConfig c;
    c.model = "llama-tiny";
    c.data = "synthetic";
    c.batch = 2;
    c.seq_len = 32;
    c.steps = 2;
    c.eval_batches = 1;
    c.device = "cpu";
    c.checkpoint = nn::CheckpointSpec::blocks();
    c.precision = precision;
    c.quantize = QuantizeKind::Nf4;
    PlanResult p = plan_run(c, PlanOptions{"cpu"});
    const int64_t before = allocator_for(Device::cpu()).stats().allocated_bytes.current;
    RunResult r = train(c);
    EXPECT_EQ(r.memory.allocated_bytes.peak - before, p.peak_allocated) << name_of(precision);
  }
}

TEST(QuantNf4Module, UnknownQuantisationIsAUsageError) {
  RunConfig c;
  const RecipeField& f = *recipe_field("--quantize");
  EXPECT_NO_THROW(set_choice(f, c, "nf4"));
  EXPECT_EQ(c.quantize, QuantizeKind::Nf4);
  EXPECT_NO_THROW(set_choice(f, c, "none"));
  EXPECT_THROW(set_choice(f, c, "int8"), UsageError);
  EXPECT_NE(error_of([&] { set_choice(f, c, "int8"); }).find("--quantize int8: the choices are none or nf4"), std::string::npos);
}

// The fused dequantisation (what nf4_linear runs) gives the bits of the two-step one, for partial
// blocks and several nested blocks.
TEST(QuantNf4Module, FusedDequantiseEqualsBlockAbsmaxThenDequantise) {
  for (int64_t n : {int64_t(7), int64_t(64 * 300 + 37), int64_t(64 * 256 * 2)})
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
      const Nf4Weight q = nf4_quantize(from_vector(normal(size_t(n), uint64_t(n), 0.1f), {n}, DType::F32));
      const Tensor fused = nf4_dequantize(q, dt);
      const Tensor two = empty({n}, dt, Device::cpu());
      backend_for(Device::cpu()).nf4_dequantize(two, q.codes, nf4_block_absmax(q));
      EXPECT_EQ(values(fused), values(two)) << n << " " << dtype_name(dt);
    }
}

// ViT: the blocks' Linears (out_proj, mlp.0, mlp.3) are quantised, the classifier heads.head (an
// entry of a ModuleList, not inside one) and the fused in_proj (no Linear) are not.
TEST(QuantNf4Module, VitQuantisesItsBlocksLinearsOnly) {
  const auto m = models::create_model("vit-tiny", {.device = Device::meta()});
  const std::vector<std::string> paths = nf4_target_paths(*m);
  EXPECT_EQ(paths.size(), size_t(3 * 4));
  for (const std::string& p : paths) EXPECT_EQ(p.rfind("encoder.layers.", 0), 0u) << p;
  const auto skip = nf4_target_paths(*m, {"out_proj"});
  EXPECT_EQ(skip.size(), size_t(2 * 4));
}
