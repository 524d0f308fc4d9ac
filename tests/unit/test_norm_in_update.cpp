// The unclipped step's gradient norm taken by the update itself (Optimizer::step_measuring,
// AdamWArgs::sumsq): the same update, the norm clip_grad_norm measures, non-finite gradients' elements
// left alone, and the trainer reading and checking it at the next step.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "leantrain/device.h"
#include "leantrain/error.h"
#include "leantrain/ops.h"
#include "leantrain/optim.h"
#include "leantrain/plan.h"
#include "leantrain/random.h"
#include "knob_env.h"
#include "train_test_util.h"

using namespace lt;
using lt::test::TempDir;
using lt::test::TrainerRun;

namespace {

// Two f32 parameters with gradients g0, g1 (a second step's state too: m and v nonzero).
struct Pair {
  Tensor a, b;
  Pair(std::vector<double> ga, std::vector<double> gb) {
    a = from_vector(std::vector<double>{0.5, -1.0, 2.0, 0.25}, {4}, DType::F32).set_requires_grad(true);
    b = from_vector(std::vector<double>{1.5, -0.75, 0.125}, {3}, DType::F32).set_requires_grad(true);
    a.set_grad(from_vector(ga, {4}, DType::F32));
    b.set_grad(from_vector(gb, {3}, DType::F32));
  }
  std::vector<NamedTensor> named() { return {{"a", a}, {"b", b}}; }
};

AdamWOptions options() {
  AdamWOptions o;
  o.lr = 0.1;
  o.weight_decay = 0.01;
  return o;
}

std::vector<double> values(const Tensor& t) { return t.to_double_vector(); }

}  // namespace

TEST(NormInUpdate, SameUpdateAndTheNormClipGradNormMeasures) {
  const std::vector<double> ga{0.3, -0.2, 0.7, 1.5}, gb{-0.4, 0.05, 2.5};
  Pair plain(ga, gb), measured(ga, gb);
  AdamW p(plain.named(), options()), m(measured.named(), options());
  ASSERT_TRUE(m.measures_norm());
  const GradNorm reference = clip_grad_norm({measured.a, measured.b}, 0.0);
  for (int step = 0; step < 2; ++step) {
    p.step();
    Tensor sumsq = zeros({1}, DType::F32, Device::cpu());
    m.step_measuring(sumsq);
    EXPECT_EQ(test::bytes_of(plain.a), test::bytes_of(measured.a)) << step;
    EXPECT_EQ(test::bytes_of(plain.b), test::bytes_of(measured.b)) << step;
    EXPECT_FLOAT_EQ(float(std::sqrt(sumsq.item())), float(reference.norm)) << step;
  }
  const OptimizerStateDict sp = p.state_dict(), sm = m.state_dict();
  ASSERT_EQ(sp.tensors.size(), sm.tensors.size());
  for (const auto& [key, t] : sp.tensors) EXPECT_EQ(test::bytes_of(t), test::bytes_of(sm.tensors.at(key))) << key;
}

TEST(NormInUpdate, NonFiniteGradientsLeaveTheirElementsAndMakeTheNormNonFinite) {
  const std::vector<double> ga{0.3, std::nan(""), 0.7, INFINITY}, gb{-0.4, 0.05, 2.5};
  const std::vector<double> finite_a{0.3, 0.0, 0.7, 0.0};
  Pair measured(ga, gb), reference(finite_a, gb);
  const std::vector<double> before = values(measured.a);
  AdamW m(measured.named(), options()), r(reference.named(), options());
  Tensor sumsq = zeros({1}, DType::F32, Device::cpu());
  m.step_measuring(sumsq);
  r.step();
  EXPECT_FALSE(std::isfinite(sumsq.item()));
  const std::vector<double> got = values(measured.a), want = values(reference.a);
  EXPECT_EQ(got[1], before[1]);  // NaN gradient: the element as it was
  EXPECT_EQ(got[3], before[3]);  // inf
  EXPECT_EQ(got[0], want[0]);    // the others updated as usual
  EXPECT_EQ(got[2], want[2]);
  EXPECT_EQ(test::bytes_of(measured.b), test::bytes_of(reference.b));
  // The moments of the skipped elements stay zero (their first step).
  const OptimizerStateDict sd = m.state_dict();
  for (const char* key : {"a.exp_avg", "a.exp_avg_sq"}) {
    const std::vector<double> moment = values(sd.tensors.at(key));
    EXPECT_EQ(moment[1], 0.0) << key;
    EXPECT_EQ(moment[3], 0.0) << key;
    EXPECT_NE(moment[0], 0.0) << key;
  }
}

TEST(NormInUpdate, OnlyWhereTheUpdateCanMeasure) {
  Pair x({1, 2, 3, 4}, {5, 6, 7});
  SgdOptions so;
  so.lr = 0.1;
  SGD sgd(x.named(), so);
  EXPECT_FALSE(sgd.measures_norm());
  Tensor sumsq = zeros({1}, DType::F32, Device::cpu());
  EXPECT_THROW(sgd.step_measuring(sumsq), Error);
  Tensor h = from_vector(std::vector<double>{1, 2}, {2}, DType::BF16).set_requires_grad(true);
  h.set_grad(from_vector(std::vector<double>{0.5, 0.5}, {2}, DType::BF16));
  AdamW master(std::vector<NamedTensor>{{"h", h}}, options());
  master.set_master_weights(true);  // bf16 parameters updated through f32 copies
  EXPECT_FALSE(master.measures_norm());
}

namespace {

std::vector<nlohmann::json> metric_lines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);)
    if (line.find("\"loss\"") != std::string::npos) out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace

// With LEANTRAIN_NORM_IN_UPDATE=1 an unclipped run writes every step's norm (read a step later),
// the one the separate pass measures before the update (off, the default), with the same losses
// bit for bit; a plan predicts the run's peaks either way (the accumulator's 512-byte block lives
// into the next step).
TEST(NormInUpdate, TheRunReportsEveryStepsNormAsTheSeparatePassDid) {
  TempDir tmp;
  RunConfig c = test::tiny_gpt(tmp.path);
  c.steps = 5;
  c.eval_every = 2;  // an evaluation between steps reads the pending norm first
  c.metrics = (tmp.path / "in_update.jsonl").string();
  RunConfig sep = c;
  sep.metrics = (tmp.path / "separate.jsonl").string();
  auto run_beside_plan = [&](const RunConfig& cfg) {
    const PlanResult p = plan_run(cfg, PlanOptions{"cpu"});
    const int64_t before = allocator_for(Device::cpu()).stats().allocated_bytes.current;
    const int64_t pinned_before = pinned_host_allocator(Device::cpu()).stats().allocated_bytes.current;
    RunResult r = train(cfg);
    EXPECT_EQ(r.memory.allocated_bytes.peak - before, p.peak_allocated) << cfg.metrics;
    // The loss and norm readbacks' pinned slots are counted in the plan as in the run.
    EXPECT_EQ(r.pinned_host.allocated_bytes.peak - pinned_before, p.pinned_host.allocated_bytes.peak) << cfg.metrics;
    return r;
  };
  RunResult separate = run_beside_plan(sep);
  RunResult in_update;
  {
    test::KnobEnv on("LEANTRAIN_NORM_IN_UPDATE", "1");
    in_update = run_beside_plan(c);
  }
  EXPECT_EQ(in_update.losses, separate.losses);
  const auto a = metric_lines(c.metrics), b = metric_lines(sep.metrics);
  ASSERT_EQ(a.size(), 5u);
  ASSERT_EQ(b.size(), 5u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]["step"], int(i + 1));
    ASSERT_TRUE(a[i]["grad_norm"].is_number()) << i;
    EXPECT_NEAR(a[i]["grad_norm"].get<double>(), b[i]["grad_norm"].get<double>(),
                1e-6 * b[i]["grad_norm"].get<double>())
        << i;
  }
}

namespace {

// Writes a NaN into one gradient after backward at `at` (the loss stays finite).
class PoisonGrad : public StepHook {
 public:
  explicit PoisonGrad(int64_t at) : at_(at) {}
  const char* name() const override { return "poison"; }
  bool after_backward(Trainer& t) override {
    if (t.steps_done() + 1 != at_) return true;
    for (const Tensor& p : t.model().parameters())
      if (p.grad().defined()) {
        Tensor g = p.grad();
        copy_(slice(reshape(g, {-1}), 0, 0, 1), full({1}, std::nan(""), g.dtype(), g.device()));
        break;
      }
    return true;
  }

 private:
  int64_t at_;
};

}  // namespace

TEST(NormInUpdate, OffByDefaultTheStepReportsItsNormAtOnce) {
  TempDir tmp;
  TrainerRun run(test::tiny_gpt(tmp.path));
  const StepOutcome o = run->step();
  EXPECT_FALSE(o.grad_norm_pending);
  EXPECT_TRUE(std::isfinite(o.grad_norm));
  EXPECT_GT(o.grad_norm, 0.0);
}

TEST(NormInUpdate, ANonFiniteGradientStopsTheRunAtTheNextStepNamingItsOwn) {
  TempDir tmp;
  RunConfig c = test::tiny_gpt(tmp.path);
  test::KnobEnv on("LEANTRAIN_NORM_IN_UPDATE", "1");
  TrainerRun run(c);
  run->add_hook(std::make_unique<PoisonGrad>(2));
  StepOutcome first = run->step();
  ASSERT_TRUE(first.grad_norm_pending);
  StepOutcome second = run->step();  // the poisoned step returns: its norm is read later
  EXPECT_TRUE(std::isfinite(run->grad_norm_of(1)));
  try {
    run->step();
    FAIL() << "no error";
  } catch (const NumericError& e) {
    EXPECT_NE(std::string(e.what()).find("at step 2"), std::string::npos) << e.what();
    EXPECT_NE(e.fix().find("--lr"), std::string::npos);
  }
  (void)second;
  for (const Tensor& p : run->model().parameters())
    for (double v : p.to_double_vector()) ASSERT_TRUE(std::isfinite(v));  // the NaN element was left alone
}

// The CUDA kernel: the CPU's update bit for bit (the f32 arithmetic both backends share), the norm
// the separate pass measures (to f32 rounding: the sums run in another order), over tensors big
// enough for many blocks, one unaligned (the element-wise path), one with a NaN and an inf.
TEST(NormInUpdate, CudaKernelMatchesTheCpuAndTheSeparatePass) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  Generator gen(11);
  const std::vector<Shape> shapes{{1000, 257}, {3, 5}, {70000}};
  std::vector<Tensor> p_cpu, p_gpu, g_cpu;
  for (const Shape& s : shapes) {
    Tensor p = randn(s, gen), g = randn(s, gen, 0.1f);
    p_cpu.push_back(p.clone().set_requires_grad(true));
    p_gpu.push_back(p.to(Device::cuda(0)).set_requires_grad(true));
    g_cpu.push_back(g);
  }
  std::vector<float> poisoned = g_cpu[2].to_float_vector();
  poisoned[12345] = std::nanf("");
  poisoned[54321] = INFINITY;
  for (int pass = 0; pass < 2; ++pass) {  // finite gradients, then the poisoned ones
    if (pass == 1) g_cpu[2] = from_vector(std::vector<double>(poisoned.begin(), poisoned.end()), shapes[2], DType::F32);
    std::vector<NamedTensor> nc, ng;
    for (size_t i = 0; i < shapes.size(); ++i) {
      p_cpu[i].set_grad(g_cpu[i].clone());
      p_gpu[i].set_grad(g_cpu[i].to(Device::cuda(0)));
      nc.push_back({"p" + std::to_string(i), p_cpu[i]});
      ng.push_back({"p" + std::to_string(i), p_gpu[i]});
    }
    AdamW cpu(nc, options()), gpu(ng, options());
    Tensor sc = zeros({1}, DType::F32, Device::cpu()), sg = zeros({1}, DType::F32, Device::cuda(0));
    const GradNorm reference = clip_grad_norm(p_gpu, 0.0);
    cpu.step_measuring(sc);
    gpu.step_measuring(sg);
    for (size_t i = 0; i < shapes.size(); ++i)
      EXPECT_EQ(test::bytes_of(p_cpu[i]), test::bytes_of(p_gpu[i])) << "pass " << pass << " tensor " << i;
    if (pass == 0) {
      EXPECT_NEAR(std::sqrt(sg.item()), reference.norm, 1e-5 * reference.norm);
      EXPECT_NEAR(std::sqrt(sc.item()), reference.norm, 1e-5 * reference.norm);
    } else {
      EXPECT_FALSE(std::isfinite(sg.item()));
      EXPECT_FALSE(std::isfinite(sc.item()));
    }
  }
}
