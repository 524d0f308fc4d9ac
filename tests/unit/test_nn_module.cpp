// Module tree: names, paths, tying, modes, forward wrappers and where parameters are created.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "leantrain/autograd.h"
#include "leantrain/error.h"
#include "leantrain/memory.h"
#include "leantrain/nn.h"

using namespace lt;

namespace {

class Tree : public nn::Module {
 public:
  const char* type_name() const override { return "Tree"; }
  explicit Tree(const nn::InitOptions& o) {
    nn::ParamFactory pf(o);
    scale = &register_parameter("scale", pf.make({2}, nn::Init::ones()));
    emb = register_module("emb", std::make_shared<nn::Embedding>(pf, 10, 2));
    blocks = register_module("blocks", std::make_shared<nn::ModuleList>());
    for (int i = 0; i < 2; ++i) blocks->append(std::make_shared<nn::Linear>(pf, 2, 2));
    drop = register_module("drop", std::make_shared<nn::Dropout>(0.5, pf.next_seed()));
  }
  void add_bad(const std::string& name) { register_parameter(name, ones({1})); }
  Tensor* scale;
  std::shared_ptr<nn::Embedding> emb;
  std::shared_ptr<nn::ModuleList> blocks;
  std::shared_ptr<nn::Dropout> drop;
};

// Holds a tensor that another module already owns (weight tying).
class Holder : public nn::Module {
 public:
  Holder(std::shared_ptr<nn::Module> a, Tensor tied) {
    register_module("a", std::move(a));
    register_parameter("tied", std::move(tied));
  }
};

std::vector<std::string> names_of(const std::vector<std::pair<std::string, Tensor>>& v) {
  std::vector<std::string> out;
  for (auto& [n, t] : v) out.push_back(n);
  return out;
}

}  // namespace

TEST(NnModule, DottedNamesAndPaths) {
  Tree t({});
  EXPECT_EQ(names_of(t.named_parameters()),
            (std::vector<std::string>{"scale", "emb.weight", "blocks.0.weight", "blocks.0.bias", "blocks.1.weight",
                                      "blocks.1.bias"}));
  std::vector<std::string> paths;
  for (auto& [p, m] : t.named_modules()) paths.push_back(p);
  EXPECT_EQ(paths, (std::vector<std::string>{"", "emb", "blocks", "blocks.0", "blocks.1", "drop"}));
  EXPECT_STREQ(t.find_module("blocks.1")->type_name(), "Linear");
  EXPECT_EQ(t.find_module("blocks.1"), &t.blocks->operator[](1));
  EXPECT_EQ(t.find_module("blocks.7"), nullptr);
  EXPECT_EQ(t.find_module("emb.weight"), nullptr);
  EXPECT_EQ(t.find_module(""), &t);
  EXPECT_TRUE(t.parameter("blocks.1.bias").same(t.blocks->at<nn::Linear>(1).bias()));
  EXPECT_THROW(t.parameter("blocks.1.gamma"), Error);
  EXPECT_EQ(t.num_parameters(), 2 + 20 + 2 * 6);
  EXPECT_EQ(t.parameter_bytes(), 4 * t.num_parameters());
  EXPECT_EQ(t.parameters().size(), 6u);
}

TEST(NnModule, RejectsBadAndDuplicateNames) {
  Tree t({});
  EXPECT_THROW(t.add_bad("scale"), Error);
  EXPECT_THROW(t.add_bad("emb"), Error);
  EXPECT_THROW(t.add_bad("a.b"), Error);
  EXPECT_THROW(t.add_bad(""), Error);
}

TEST(NnModule, TiedParameterListedOnce) {
  auto t = std::make_shared<Tree>(nn::InitOptions{});
  Holder h(t, t->emb->weight());
  auto names = names_of(h.named_parameters());
  // As in PyTorch: the root's own parameters come first, so the tied tensor keeps the name "tied".
  EXPECT_EQ(std::count(names.begin(), names.end(), "tied"), 1);
  EXPECT_EQ(std::count(names.begin(), names.end(), "a.emb.weight"), 0);
  EXPECT_EQ(h.num_parameters(), t->num_parameters());
}

TEST(NnModule, TrainEvalPropagates) {
  Tree t({});
  EXPECT_TRUE(t.drop->is_training());
  t.eval();
  EXPECT_FALSE(t.drop->is_training());
  EXPECT_FALSE(t.blocks->at<nn::Linear>(1).is_training());
  t.train();
  EXPECT_TRUE(t.blocks->is_training());
}

TEST(NnModule, ParametersAreCreatedOnTargetDeviceDtypeAndCategory) {
  Tree t({.dtype = DType::BF16, .seed = 5});
  for (auto& [n, p] : t.named_parameters()) {
    SCOPED_TRACE(n);
    EXPECT_EQ(p.dtype(), DType::BF16);
    EXPECT_TRUE(p.device().is_cpu());
    EXPECT_TRUE(p.requires_grad());
    EXPECT_TRUE(p.is_leaf());
    EXPECT_EQ(p.category(), Category::Parameter);
  }
  EXPECT_EQ(t.parameter_bytes(), 2 * t.num_parameters());
}

TEST(NnModule, SameSeedSameValuesOtherSeedOtherValues) {
  Tree a({.seed = 7}), b({.seed = 7}), c({.seed = 8});
  EXPECT_EQ(a.emb->weight().to_float_vector(), b.emb->weight().to_float_vector());
  EXPECT_NE(a.emb->weight().to_float_vector(), c.emb->weight().to_float_vector());
  // Same draws whatever the storage dtype: bf16 parameters are the rounded f32 ones.
  Tree h({.dtype = DType::BF16, .seed = 7});
  auto f = a.emb->weight().to_float_vector(), g = h.emb->weight().to_float_vector();
  for (size_t i = 0; i < f.size(); ++i) EXPECT_EQ(g[i], bf16_to_float(float_to_bf16(f[i])));
}

TEST(NnModule, MetaParametersHaveNoMemory) {
  const int64_t cpu_before = allocator_for(Device::cpu()).stats().allocated_bytes.current;
  const int64_t meta_before = allocator_for(Device::meta()).stats().category[int(Category::Parameter)].current;
  Tree t({.device = Device::meta()});
  for (auto& [n, p] : t.named_parameters()) {
    EXPECT_TRUE(p.device().is_meta());
    EXPECT_EQ(p.raw_data(), nullptr);
  }
  EXPECT_EQ(allocator_for(Device::cpu()).stats().allocated_bytes.current, cpu_before);
  EXPECT_GE(allocator_for(Device::meta()).stats().category[int(Category::Parameter)].current - meta_before,
            t.parameter_bytes());
}

TEST(NnModule, InitDistributions) {
  nn::ParamFactory pf({.seed = 3});
  auto stats = [](const Tensor& t) {
    auto v = t.to_double_vector();
    double m = 0, s = 0, mx = 0;
    for (double x : v) m += x;
    m /= double(v.size());
    for (double x : v) s += (x - m) * (x - m), mx = std::max(mx, std::abs(x));
    return std::array<double, 3>{m, std::sqrt(s / double(v.size())), mx};
  };
  nn::Init x = nn::Init::xavier_uniform(100, 300);
  Tensor normal = pf.make({200, 200}, nn::Init::normal(0.02)), uniform = pf.make({300, 100}, x),
         one = pf.make({5}, nn::Init::ones());
  pf.materialize();
  auto n = stats(normal);
  EXPECT_NEAR(n[0], 0.0, 1e-3);
  EXPECT_NEAR(n[1], 0.02, 1e-3);
  auto u = stats(uniform);
  EXPECT_NEAR(x.a, std::sqrt(6.0 / 400.0), 1e-12);
  EXPECT_LE(u[2], x.a);
  EXPECT_NEAR(u[1], x.a / std::sqrt(3.0), 3e-3);  // std of U(-a, a)
  EXPECT_EQ(stats(one)[0], 1.0);
}

TEST(NnModule, ForwardWrapperSeesPathAndWrapsResult) {
  Tree t({});
  auto& lin = t.blocks->at<nn::Linear>(0);
  Tensor x = ones({3, 2});
  Tensor plain = lin(x);
  int calls = 0;
  t.find_module("blocks.0")->set_forward_wrapper(
      [&](nn::Module& self, const Tensor& in, const nn::Module::ForwardFn& fwd) {
        ++calls;
        EXPECT_EQ(&self, &lin);
        return scale(fwd(in), 2.0);
      });
  Tensor wrapped = lin(x);
  EXPECT_EQ(calls, 1);
  auto p = plain.to_float_vector(), w = wrapped.to_float_vector();
  for (size_t i = 0; i < p.size(); ++i) EXPECT_FLOAT_EQ(w[i], 2 * p[i]);
  lin.set_forward_wrapper(nullptr);
  EXPECT_EQ(lin(x).to_float_vector(), p);
}

TEST(NnModule, ParameterSlotReplacementIsUsedByForward) {
  Tree t({});
  auto& lin = t.blocks->at<nn::Linear>(1);
  for (auto& [name, slot] : t.named_parameter_slots())
    if (name == "blocks.1.weight") *slot = zeros({2, 2});
  EXPECT_EQ(lin(ones({1, 2})).to_float_vector(), lin.bias().to_float_vector());
}

TEST(NnLinear, Conv1DLayoutEqualsTorchLayout) {
  nn::ParamFactory pf({.seed = 11});
  nn::Linear torch_l(pf, 3, 4), conv(pf, 3, 4, {.layout = nn::WeightLayout::InOut});
  pf.materialize();
  EXPECT_STREQ(conv.type_name(), "Conv1D");
  EXPECT_EQ(conv.weight().shape(), Shape({3, 4}));
  {
    NoGradGuard ng;
    copy_(conv.weight(), transpose(torch_l.weight(), 0, 1));
    copy_(conv.bias(), torch_l.bias());
  }
  Generator g(1);
  Tensor x = randn({2, 5, 3}, g);
  auto a = torch_l(x).to_float_vector(), b = conv(x).to_float_vector();
  ASSERT_EQ(conv(x).shape(), Shape({2, 5, 4}));
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5);
}

TEST(NnLinear, GradientsReachWeightAndBias) {
  nn::ParamFactory pf({.seed = 2});
  nn::Linear conv(pf, 2, 3, {.layout = nn::WeightLayout::InOut});
  pf.materialize();
  Tensor x = from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2});
  sum_all(conv(x)).backward();
  // d sum(x W + b) / dW[i][j] = sum over rows of x[:, i]; / db = rows.
  EXPECT_EQ(conv.weight().grad().to_float_vector(), (std::vector<float>{4, 4, 4, 6, 6, 6}));
  EXPECT_EQ(conv.bias().grad().to_float_vector(), (std::vector<float>{2, 2, 2}));
  EXPECT_EQ(conv.weight().grad().category(), Category::Gradient);
}

TEST(NnLinear, RejectsWrongInputWidth) {
  nn::ParamFactory pf({});
  nn::Linear conv(pf, 2, 3, {.layout = nn::WeightLayout::InOut});
  pf.materialize();
  EXPECT_THROW(conv(ones({1, 5})), Error);
}
