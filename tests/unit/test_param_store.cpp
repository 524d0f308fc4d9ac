// The parameter store: one flat allocation per (device, dtype), each parameter a view in it,
// with values bit-identical to the per-parameter build (InitOptions::flat = false).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "leantrain/autograd.h"
#include "leantrain/error.h"
#include "leantrain/memory.h"
#include "leantrain/models.h"
#include "leantrain/optim.h"
#include "small_models.h"

using namespace lt;
using lt::test::small_gpt2;
using lt::test::small_vit;

namespace {

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw_data(), b.raw_data(), size_t(a.nbytes())) == 0;
}

void expect_bitwise_equal(const nn::Module& flat, const nn::Module& separate) {
  auto a = flat.named_parameters(), b = separate.named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_TRUE(same_bytes(a[i].second, b[i].second)) << a[i].first;
    EXPECT_EQ(a[i].second.requires_grad(), b[i].second.requires_grad()) << a[i].first;
  }
}

// Every parameter is a 512-byte-aligned view of one storage, the views do not overlap, and the
// storage is exactly the sum of their rounded sizes.
void expect_one_flat_buffer(const nn::Module& m) {
  auto ps = m.named_parameters();
  ASSERT_FALSE(ps.empty());
  const auto storage = ps.front().second.storage();
  std::vector<std::pair<int64_t, int64_t>> ranges;  // [begin, end) in bytes
  int64_t total = 0;
  for (auto& [name, p] : ps) {
    EXPECT_EQ(p.storage(), storage) << name;
    EXPECT_TRUE(p.is_contiguous()) << name;
    const int64_t begin = p.offset() * int64_t(dtype_size(p.dtype()));
    EXPECT_EQ(begin % 512, 0) << name;
    ranges.push_back({begin, begin + p.nbytes()});
    total += nn::ParamFactory::flat_bytes(p.shape(), p.dtype());
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) EXPECT_LE(ranges[i - 1].second, ranges[i].first);
  EXPECT_EQ(storage->nbytes(), total);
}

}  // namespace

TEST(ParamStore, FlatGpt2EqualsThePerParameterBuildBitForBit) {
  for (DType dt : {DType::F32, DType::BF16}) {
    for (bool tied : {true, false}) {
      models::GPT2 flat(small_gpt2(tied), {.dtype = dt, .seed = 7});
      models::GPT2 separate(small_gpt2(tied), {.dtype = dt, .seed = 7, .flat = false});
      expect_bitwise_equal(flat, separate);
      expect_one_flat_buffer(flat);
      auto ps = separate.named_parameters();
      EXPECT_NE(ps[0].second.storage(), ps[1].second.storage());  // the per-parameter build
    }
  }
}

TEST(ParamStore, FlatVitEqualsThePerParameterBuildBitForBit) {
  models::ViT flat(small_vit(), {.seed = 3});
  models::ViT separate(small_vit(), {.seed = 3, .flat = false});
  expect_bitwise_equal(flat, separate);
  expect_one_flat_buffer(flat);
}

// The store takes the bytes the separate allocations took, in one allocation.
TEST(ParamStore, OneAllocationOfTheSameParameterBytes) {
  Allocator& a = allocator_for(Device::cpu());
  auto measure = [&](bool flat) {
    const MemoryStats before = a.stats();
    auto m = std::make_shared<models::GPT2>(small_gpt2(), nn::InitOptions{.seed = 1, .flat = flat});
    const MemoryStats after = a.stats();
    return std::make_pair(after.num_allocs - before.num_allocs,
                          after.category[int(Category::Parameter)].current - before.category[int(Category::Parameter)].current);
  };
  auto [flat_allocs, flat_bytes] = measure(true);
  auto [sep_allocs, sep_bytes] = measure(false);
  EXPECT_EQ(flat_allocs, 1);
  EXPECT_EQ(sep_allocs, int64_t(models::GPT2(small_gpt2(), {.device = Device::meta()}).named_parameters().size()));
  EXPECT_EQ(flat_bytes, sep_bytes);
}

// Views at offsets go through the kernels, autograd and the optimizer as separate tensors do.
TEST(ParamStore, FlatModelTrainsExactlyLikeThePerParameterModel) {
  auto run = [](bool flat) {
    models::GPT2 m(small_gpt2(false), {.seed = 5, .flat = flat});
    OptimizerConfig oc;
    oc.lr = 1e-2;
    oc.weight_decay = 0.1;
    auto opt = make_optimizer(oc, decay_groups(m.named_trainable_parameters()));
    std::vector<int64_t> ids(2 * 8);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t((i * 7 + 3) % 64);
    Tensor x = from_ints(ids, {2, 8}), y = from_ints(ids, {2, 8});
    std::vector<double> losses;
    for (int s = 0; s < 3; ++s) {
      Tensor l = m.loss(x, y);
      losses.push_back(l.item());
      l.backward();
      opt->step();
      opt->zero_grad();
    }
    return losses;
  };
  EXPECT_EQ(run(true), run(false));
}

namespace {
// f32 weights, a u8 (quantized-style) weight and an f32 buffer from one factory.
struct Mixed : nn::Module {
  Tensor *w, *codes, *stats;
  explicit Mixed(const nn::InitOptions& o) {
    nn::ParamFactory pf(o);
    w = &register_parameter("w", pf.make({3, 5}, nn::Init::normal(1.0)));
    codes = &register_parameter("codes", pf.make({7}, nn::Init::ones(), DType::U8));
    stats = &register_buffer("stats", pf.make_buffer({4}, nn::Init::ones()));
  }  // the factory materializes the store as it goes out of scope
};
}  // namespace

TEST(ParamStore, OneBufferPerDtypeWithFrozenIntegerWeights) {
  Mixed m({.seed = 2});
  EXPECT_EQ(m.w->storage(), m.stats->storage());  // f32 parameter and f32 buffer: one store
  EXPECT_NE(m.w->storage(), m.codes->storage());  // u8: a store of its own
  EXPECT_EQ(m.codes->dtype(), DType::U8);
  EXPECT_FALSE(m.codes->requires_grad());  // integers never train
  EXPECT_EQ(m.codes->to_int_vector(), std::vector<int64_t>(7, 1));
  EXPECT_EQ(m.stats->to_float_vector(), std::vector<float>(4, 1.0f));
  ASSERT_EQ(m.named_trainable_parameters().size(), 1u);
  EXPECT_EQ(m.named_trainable_parameters()[0].first, "w");
  // An optimizer over the trainable parameters accepts the model (a u8 one would be refused).
  EXPECT_NO_THROW(SGD(m.named_trainable_parameters(), SgdOptions{}));
  EXPECT_THROW(SGD(m.named_parameters(), SgdOptions{}), Error);
}

TEST(ParamStore, UsingAParameterBeforeMaterializeIsAClearError) {
  nn::ParamFactory pf({.seed = 1});
  nn::Linear lin(pf, 2, 3);
  std::string msg;
  try {
    lin(ones({1, 2}));
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("has no memory yet"), std::string::npos) << msg;
  EXPECT_NE(msg.find("materialize()"), std::string::npos) << msg;
  pf.materialize();
  EXPECT_EQ(lin(ones({1, 2})).shape(), Shape({1, 3}));
  pf.materialize();  // idempotent
}

TEST(ParamStore, RandomInitOfAnIntegerTensorIsRefused) {
  nn::ParamFactory pf({});
  EXPECT_THROW(pf.make({4}, nn::Init::normal(1.0), DType::U8), Error);
}
