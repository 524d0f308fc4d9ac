// Optimizer state dicts: a round trip resumes bit-identically; mismatches fail clearly.
#include <gtest/gtest.h>

#include "leantrain/error.h"
#include "leantrain/ops.h"
#include "leantrain/optim.h"

using namespace lt;

namespace {
std::vector<NamedTensor> make_params() {
  return {{"w", from_vector(std::vector<double>{1, -2, 3, 0.5}, {2, 2}, DType::F64).set_requires_grad(true)},
          {"b", from_vector(std::vector<double>{0.1, 0.2}, {2}, DType::F64).set_requires_grad(true)}};
}
void set_grads(std::vector<NamedTensor>& ps, int t) {
  for (auto& [n, p] : ps) {
    std::vector<double> g(size_t(p.numel()));
    for (size_t i = 0; i < g.size(); ++i) g[i] = std::cos(0.3 * t + double(i)) + 0.1 * double(n.size());
    p.set_grad(from_vector(g, p.shape(), DType::F64));
  }
}
// Runs `steps` steps; if resume_at >= 0, moves to a fresh optimizer (and parameter copies) there.
std::vector<double> train(std::unique_ptr<Optimizer> (*make)(std::vector<NamedTensor>), int steps, int resume_at) {
  auto ps = make_params();
  auto opt = make(ps);
  for (int t = 0; t < steps; ++t) {
    if (t == resume_at) {
      OptimizerStateDict sd = opt->state_dict();
      auto fresh = make_params();
      for (size_t k = 0; k < ps.size(); ++k) copy_(fresh[k].second, ps[k].second);
      ps = fresh;
      opt = make(ps);
      opt->load_state_dict(sd);
      EXPECT_EQ(opt->step_count(), resume_at);
    }
    set_grads(ps, t);
    opt->step();
  }
  auto out = ps[0].second.to_double_vector();
  for (double v : ps[1].second.to_double_vector()) out.push_back(v);
  return out;
}
std::unique_ptr<Optimizer> make_adamw(std::vector<NamedTensor> ps) {
  OptimizerConfig c;
  c.kind = OptimizerKind::AdamW;
  c.weight_decay = 0.1;
  c.lr = 0.01;
  return make_optimizer(c, decay_groups(ps));
}
std::unique_ptr<Optimizer> make_sgd(std::vector<NamedTensor> ps) {
  OptimizerConfig c;
  c.kind = OptimizerKind::Sgd;
  c.lr = 0.1;
  c.momentum = 0.9;
  return make_optimizer(c, {{ps, {}}});
}
}  // namespace

TEST(OptimState, AdamWRoundTripResumesExactly) { EXPECT_EQ(train(make_adamw, 5, 3), train(make_adamw, 5, -1)); }
TEST(OptimState, SgdRoundTripResumesExactly) { EXPECT_EQ(train(make_sgd, 5, 2), train(make_sgd, 5, -1)); }

TEST(OptimState, KeysAndSteps) {
  auto ps = make_params();
  auto opt = make_adamw(ps);
  EXPECT_TRUE(opt->state_dict().tensors.empty());
  set_grads(ps, 0);
  opt->step();
  opt->step();
  OptimizerStateDict sd = opt->state_dict();
  EXPECT_EQ(sd.step, 2);
  for (const char* k : {"w.exp_avg", "w.exp_avg_sq", "w.step", "b.exp_avg", "b.exp_avg_sq", "b.step"})
    EXPECT_EQ(sd.tensors.count(k), 1u) << k;
  EXPECT_EQ(sd.tensors.size(), 6u);
  EXPECT_EQ(sd.tensors.at("w.exp_avg").shape(), (Shape{2, 2}));
}

TEST(OptimState, MismatchesThrow) {
  auto ps = make_params();
  auto opt = make_adamw(ps);
  set_grads(ps, 0);
  opt->step();
  OptimizerStateDict sd = opt->state_dict();

  auto extra = sd;
  extra.tensors["nope.exp_avg"] = zeros({1});
  EXPECT_THROW(make_adamw(make_params())->load_state_dict(extra), Error);

  auto missing = sd;
  missing.tensors.erase("w.exp_avg_sq");
  EXPECT_THROW(make_adamw(make_params())->load_state_dict(missing), Error);

  auto shape = sd;
  shape.tensors["b.exp_avg"] = zeros({3}, DType::F64);
  EXPECT_THROW(make_adamw(make_params())->load_state_dict(shape), Error);

  // AdamW state into SGD: unexpected keys.
  EXPECT_THROW(make_sgd(make_params())->load_state_dict(sd), Error);
}

TEST(OptimState, DecayGroupsSplitByRank) {
  auto ps = make_params();
  auto groups = decay_groups(ps);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].params[0].first, "w");
  EXPECT_FALSE(groups[0].weight_decay.has_value());
  EXPECT_EQ(groups[1].params[0].first, "b");
  EXPECT_EQ(groups[1].weight_decay.value(), 0.0);
  // A typo of adamw is refused where names are read (train/recipe_table.h); a kind is always known.
  EXPECT_FALSE(choice_named<OptimizerKind>("adam").has_value());
  EXPECT_EQ(choice_named<OptimizerKind>("adamw"), OptimizerKind::AdamW);
}
