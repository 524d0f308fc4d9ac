// Kept casts (Optimizer::set_kept_casts, LEANTRAIN_KEEP_CASTS): each update writes the 16-bit copy
// of every f32 parameter autocast cast, and autocast() hands that copy out instead of casting. The
// copy must be exactly cast(param) after every update (AdamW's kernel writes it; other optimizers
// copy), must carry the gradient back to the parameter, must not be handed out before it holds
// values, and a run with it trains the same bits as one without.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>

#include "backend/dry_compute.h"
#include "leantrain/autocast.h"
#include "leantrain/cuda_info.h"
#include "leantrain/fused_step.h"
#include "leantrain/ops.h"
#include "leantrain/optim.h"
#include "train_test_util.h"
#include "unit/knob_env.h"

using namespace lt;
using namespace lt::test;

namespace {

using test::KnobEnv;

// Two f32 parameters of odd sizes (a float4 body and a scalar tail on the GPU) and a loss that
// casts them under autocast, as a linear does.
struct Net {
  std::vector<NamedTensor> params;
  explicit Net(Device d) {
    Generator gen(3);
    params.emplace_back("w", randn({37, 29}, gen, 0.5f, DType::F32).to(d).set_requires_grad(true));
    params.emplace_back("u", randn({1031}, gen, 0.5f, DType::F32).to(d).set_requires_grad(true));
  }
  Tensor loss(DType dt) const {
    AutocastGuard on(dt);
    Tensor w = autocast(params[0].second), u = autocast(params[1].second);
    Tensor a = sum_all(mul(w, w)), b = sum_all(mul(u, u));
    return add(cast(a, DType::F32), cast(b, DType::F32));
  }
};

void expect_kept_is_the_cast(const Tensor& p, DType dt, const std::string& what) {
  AutocastGuard on(dt);
  NoGradGuard no;
  ASSERT_TRUE(detail::has_kept_cast(p)) << what;
  const Tensor kept = autocast(p);
  EXPECT_EQ(bytes_of(kept), bytes_of(cast(p, dt))) << what;
}

void check_optimizer(std::unique_ptr<Optimizer> (*make)(std::vector<ParamGroup>), Device d, DType dt,
                     const std::string& what) {
  Net net(d);
  std::unique_ptr<Optimizer> opt = make({ParamGroup{net.params, std::nullopt}});
  opt->set_kept_casts(dt);
  for (int step = 0; step < 3; ++step) {
    net.loss(dt).backward();  // step 0 casts (and marks both wanted); later steps use the kept ones
    if (step > 0)
      for (auto& [n, p] : net.params) EXPECT_TRUE(p.grad().defined()) << what << ": the gradient reached " << n;
    opt->step();
    opt->zero_grad();
    for (auto& [n, p] : net.params) expect_kept_is_the_cast(p, dt, what + " " + n + " step " + std::to_string(step));
  }
  opt->set_kept_casts(std::nullopt);
  for (auto& [n, p] : net.params) EXPECT_FALSE(detail::has_kept_cast(p)) << what;
}

std::unique_ptr<Optimizer> make_adamw(std::vector<ParamGroup> g) {
  AdamWOptions o;
  o.lr = 0.01;
  return std::make_unique<AdamW>(std::move(g), o);
}
std::unique_ptr<Optimizer> make_sgd(std::vector<ParamGroup> g) {
  SgdOptions o;
  o.lr = 0.01;
  o.momentum = 0.9;
  return std::make_unique<SGD>(std::move(g), o);
}

}  // namespace

TEST(KeptCasts, EachUpdateLeavesTheCastOfTheNewParameter) {
  for (DType dt : {DType::BF16, DType::F16}) {
    check_optimizer(make_adamw, Device::cpu(), dt, std::string("cpu adamw ") + dtype_name(dt));
    check_optimizer(make_sgd, Device::cpu(), dt, std::string("cpu sgd ") + dtype_name(dt));
  }
}

TEST(KeptCasts, CudaAdamWKernelWritesTheCastOfTheNewParameter) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  for (DType dt : {DType::BF16, DType::F16}) {
    check_optimizer(make_adamw, Device::cuda(0), dt, std::string("cuda adamw ") + dtype_name(dt));
    check_optimizer(make_sgd, Device::cuda(0), dt, std::string("cuda sgd ") + dtype_name(dt));
  }
}

// A skipped (dry) update allocates the copy, as an applied one would, but writes nothing: the copy
// is not handed out until an update has written it.
TEST(KeptCasts, ADryUpdateKeepsNothing) {
  Net net(Device::cpu());
  std::unique_ptr<Optimizer> opt = make_adamw({ParamGroup{net.params, std::nullopt}});
  opt->set_kept_casts(DType::BF16);
  net.loss(DType::BF16).backward();
  opt->dry_step();
  for (auto& [n, p] : net.params) EXPECT_FALSE(detail::has_kept_cast(p)) << n;
  opt->step();
  for (auto& [n, p] : net.params) expect_kept_is_the_cast(p, DType::BF16, n);
}

// The trainer with --keep-casts: the same losses bit for bit as without, for the usual step
// and --fused-step, AdamW and SGD; the copies are parameter memory (at most 2 bytes a parameter).
TEST(KeptCasts, TrainerRunsTrainTheSameBits) {
  TempDir tmp;
  for (OptimizerKind k : {OptimizerKind::AdamW, OptimizerKind::Sgd})
    for (bool fused : {false, true}) {
      RunConfig c = tiny_gpt(tmp.path);
      c.precision = Precision::MixedBf16;
      c.optimizer = k;
      c.fused_step = fused;
      c.steps = 5;
      const RunResult plain = train(c);
      RunConfig with = c;
      with.keep_casts = true;  // --keep-casts
      const RunResult kept = train(with);
      const std::string what = name_of(k) + (fused ? " fused" : "");
      EXPECT_EQ(kept.losses, plain.losses) << what;
      const int64_t extra = kept.memory.category[int(Category::Parameter)].peak -
                            plain.memory.category[int(Category::Parameter)].peak;
      TrainerRun r(c);
      int64_t all16 = 0;
      for (const Tensor& p : r->model().parameters()) all16 += round_allocation(p.numel() * 2);
      EXPECT_GT(extra, 0) << what << ": no copy was kept";
      EXPECT_LE(extra, all16) << what;
    }
}

// A LLaMA block's q | k | v and gate | up run as one GEMM over their stacked weights: their kept
// copies are allocated back to back (one allocation a stack), so the stack of the copies is a view
// and no step after the first casts them; the losses are the plain run's, bit for bit, with the
// usual step and with updates inside the backward (which meet a stack's last weight first).
TEST(KeptCasts, StackedWeightsKeepTheirCopiesBackToBack) {
  TempDir tmp;
  for (bool fused : {false, true}) {
    RunConfig c = tiny_gpt(tmp.path);
    c.model = "llama-tiny";
    c.data = "synthetic";
    c.precision = Precision::MixedBf16;
    c.fused_step = fused;
    c.steps = 4;
    const std::string what = fused ? "fused" : "plain";
    const RunResult plain = train(c);
    KnobEnv on("LEANTRAIN_KEEP_CASTS", "1");  // the flag's environment form (leantrain_bench's)
    EXPECT_EQ(train(c).losses, plain.losses) << what;

    TrainerRun r(c);
    for (int i = 0; i < 2; ++i) r->step();
    std::map<std::string, Tensor> by_name;
    for (auto& [n, p] : r->model().named_trainable_parameters()) by_name[n] = p;
    int stacks = 0;
    for (const auto& entry : by_name) {
      const std::string& n = entry.first;  // a named variable: clang's C++20 cannot capture a binding
      const auto stack_of = [&](const std::string& first, const std::vector<std::string>& names) {
        std::vector<Tensor> ws;
        for (const std::string& m : names) ws.push_back(by_name.at(n.substr(0, n.size() - first.size()) + m));
        return ws;
      };
      std::vector<Tensor> ws;
      if (n.ends_with("q_proj.weight")) ws = stack_of("q_proj.weight", {"q_proj.weight", "k_proj.weight", "v_proj.weight"});
      if (n.ends_with("gate_proj.weight")) ws = stack_of("gate_proj.weight", {"gate_proj.weight", "up_proj.weight"});
      if (ws.empty()) continue;
      ++stacks;
      const std::vector<Tensor> kept = detail::kept_casts_of(ws, DType::BF16);
      ASSERT_EQ(kept.size(), ws.size()) << what << " " << n << ": a weight of the stack has no kept copy";
      for (size_t i = 1; i < kept.size(); ++i) {
        EXPECT_EQ(kept[i].storage(), kept[0].storage()) << what << " " << n;
        EXPECT_EQ(kept[i].offset(), kept[i - 1].offset() + kept[i - 1].numel()) << what << " " << n;
      }
      AutocastGuard bf16(DType::BF16);
      NoGradGuard no;
      for (size_t i = 0; i < ws.size(); ++i) EXPECT_EQ(bytes_of(kept[i]), bytes_of(cast(ws[i], DType::BF16))) << what << " " << n;
    }
    EXPECT_EQ(stacks, 2 * 2) << what << ": llama-tiny has two blocks, each with two stacks";
  }
}
