// AdamW, Lion and the 8-bit optimizers on every backend, for f32 and bf16 parameters, with
// tensors that end in a partial quantisation block (or float4), small ones that keep f32 state,
// and groups longer than one CUDA launch table. cpu: the reference must run and move every parameter. meta: the same
// allocation trace as the CPU (state sizes, rounding, categories) and no compute. cuda (when a
// GPU answers, else skipped): parameters and states equal to the CPU's. The kernels are written
// to compute the same bits; the comparison still allows a rare one-code / one-ulp difference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "leantrain/ops.h"
#include "leantrain/optim_lean.h"
#include "optim_test_values.h"

using namespace lt;

namespace {

struct Case {
  std::string name;
  OptimizerConfig cfg;
  DType param_dtype;
  std::vector<Shape> shapes;
  float grad_scale = 1.0f;
};

std::vector<Shape> mixed_shapes() { return {{64, 128}, {5000}, {4096}, {300}, {1}, {16385}, {4095}}; }
std::vector<Shape> many_shapes() {  // more tensors than one launch table holds (256 / 320)
  std::vector<Shape> s;
  for (int k = 0; k < 330; ++k) s.push_back({300 + 7 * k});
  return s;
}

OptimizerConfig cfg(const char* name, double lr, std::optional<DType> state = {}, int64_t min_8bit_size = 4096) {
  OptimizerConfig c;
  c.kind = *choice_named<OptimizerKind>(name);
  c.lr = lr;
  c.weight_decay = 0.05;
  c.state_dtype = state;
  c.min_8bit_size = min_8bit_size;  // the "many" cases quantise small tensors too, to stay quick
  return c;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> cs = {
      // AdamW: f32 tensors take the GPU's float4 path (tails of 1 and 3, a chunk boundary), bf16 the per-dtype one
      {"adamw_f32", cfg("adamw", 1e-3), DType::F32, mixed_shapes(), 0.5f},
      {"adamw_bf16", cfg("adamw", 1e-2), DType::BF16, mixed_shapes()},
      {"adamw_many", cfg("adamw", 1e-3), DType::F32, many_shapes()},
      {"lion_f32", cfg("lion", 1e-3), DType::F32, mixed_shapes(), 0.5f},
      {"lion_bf16_state", cfg("lion", 1e-3, DType::BF16), DType::F32, mixed_shapes()},
      {"lion_bf16", cfg("lion", 1e-2), DType::BF16, mixed_shapes()},
      {"lion_many", cfg("lion", 1e-3), DType::F32, many_shapes()},
      {"adamw8bit_f32", cfg("adamw8bit", 1e-3), DType::F32, mixed_shapes(), 0.5f},
      {"adamw8bit_bf16", cfg("adamw8bit", 1e-2), DType::BF16, mixed_shapes()},
      {"adamw8bit_many", cfg("adamw8bit", 1e-3, {}, 256), DType::F32, many_shapes()},
      {"lion8bit_f32", cfg("lion8bit", 1e-3), DType::F32, mixed_shapes(), 0.5f},
      {"lion8bit_bf16", cfg("lion8bit", 1e-2), DType::BF16, mixed_shapes()},
      {"lion8bit_many", cfg("lion8bit", 1e-3, {}, 256), DType::F32, many_shapes()},
  };
  return cs;
}

constexpr int kSteps = 3;

using optim_test::values;

struct Result {
  std::map<std::string, std::vector<double>> tensors;  // params and every state tensor
  std::vector<MemoryEvent> trace;
};

Result run(const Case& c, Device dev) {
  std::vector<NamedTensor> ps;
  for (size_t k = 0; k < c.shapes.size(); ++k) {
    Tensor host = from_vector(values(numel(c.shapes[k]), int(k), -1), c.shapes[k], c.param_dtype);
    ps.push_back({"p" + std::to_string(k), to_device(host, dev).set_requires_grad(true)});
  }
  auto opt = make_optimizer(c.cfg, {{ps, {}}});
  Allocator& alloc = allocator_for(dev);
  Result r;
  for (int t = 0; t < kSteps; ++t) {
    for (size_t k = 0; k < ps.size(); ++k)
      ps[k].second.set_grad(to_device(from_vector(values(numel(c.shapes[k]), int(k), t), c.shapes[k], c.param_dtype), dev));
    alloc.clear_history();
    alloc.set_history(true);
    opt->step(c.grad_scale);
    alloc.set_history(false);
    for (const MemoryEvent& e : alloc.history()) r.trace.push_back(e);
  }
  alloc.clear_history();
  if (dev.is_meta()) return r;
  for (auto& [name, p] : ps) r.tensors[name] = p.to_double_vector();
  for (auto& [key, t] : opt->state_dict().tensors)
    if (key.find(".step") == std::string::npos) r.tensors[key] = t.to_double_vector();
  return r;
}

// Values equal within `tol` (relative), allowing a rare element off by at most `off` (a sign or
// code decided differently by one rounding, then carried by later steps).
void expect_matches(const std::vector<double>& got, const std::vector<double>& want, double tol, double off,
                    const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::abs(got[i] - want[i]);
    if (d <= tol * (1 + std::abs(want[i]))) continue;
    ASSERT_LE(d, off + tol * (1 + std::abs(want[i]))) << what << "[" << i << "]: " << got[i] << " vs " << want[i];
    ++bad;
  }
  EXPECT_LE(bad, std::max<size_t>(1, got.size() / 1000)) << what << ": elements that differ";
}

class OptimLeanBackends : public ::testing::TestWithParam<std::tuple<size_t, DeviceType>> {};

TEST_P(OptimLeanBackends, MatchesCpu) {
  const Case& c = cases()[std::get<0>(GetParam())];
  const DeviceType dt = std::get<1>(GetParam());
  if (dt == DeviceType::CUDA && !cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  const Result cpu = run(c, Device::cpu());
  if (dt == DeviceType::CPU) {
    for (size_t k = 0; k < c.shapes.size(); ++k) {
      const auto start = from_vector(values(numel(c.shapes[k]), int(k), -1), c.shapes[k], c.param_dtype).to_double_vector();
      const auto& end = cpu.tensors.at("p" + std::to_string(k));
      size_t moved = 0;
      for (size_t i = 0; i < end.size(); ++i) {
        ASSERT_TRUE(std::isfinite(end[i]));
        moved += end[i] != start[i];
      }
      EXPECT_GT(moved, end.size() * 9 / 10) << "p" << k;
    }
    EXPECT_FALSE(cpu.trace.empty());
    return;
  }
  const Device dev = dt == DeviceType::CUDA ? Device::cuda() : Device::meta();
  const Result got = run(c, dev);
  if (dt == DeviceType::Meta) {
    ASSERT_EQ(got.trace.size(), cpu.trace.size());
    for (size_t i = 0; i < cpu.trace.size(); ++i) {
      const MemoryEvent &a = got.trace[i], &b = cpu.trace[i];
      EXPECT_TRUE(a.action == b.action && a.size == b.size && a.requested == b.requested && a.category == b.category)
          << "allocation " << i << ": meta " << action_name(a.action) << " " << a.size << " " << category_name(a.category)
          << ", cpu " << action_name(b.action) << " " << b.size << " " << category_name(b.category);
    }
    return;
  }
  const double lr = c.cfg.lr;
  const bool bf16 = c.param_dtype == DType::BF16;
  for (const auto& [key, want] : cpu.tensors) {
    ASSERT_TRUE(got.tensors.count(key)) << key;
    const auto& have = got.tensors.at(key);
    const bool quantised_codes = key.ends_with("exp_avg") || key.ends_with("exp_avg_sq");
    if (is_eight_bit(c.cfg.kind) && quantised_codes &&
        cpu.tensors.at(key + "_absmax").size() > 0) {
      expect_matches(have, want, 0, 1, key);  // codes: at most one position apart
    } else if (key.ends_with("_absmax")) {
      expect_matches(have, want, 1e-5, 0, key);
    } else if (key.find('.') == std::string::npos) {  // a parameter: a flipped Lion sign moves it by 2 lr per step
      expect_matches(have, want, bf16 ? 8e-3 : 1e-6, 2 * lr * kSteps, key);
    } else {  // f32 or bf16 moments
      const bool bf16_state = bf16 || c.cfg.state_dtype == DType::BF16;
      expect_matches(have, want, bf16_state ? 8e-3 : 1e-6, 0.05, key);
    }
  }
}

std::vector<std::tuple<size_t, DeviceType>> params() {
  std::vector<std::tuple<size_t, DeviceType>> ps;
  for (size_t i = 0; i < cases().size(); ++i)
    for (DeviceType d : {DeviceType::CPU, DeviceType::Meta, DeviceType::CUDA}) ps.push_back({i, d});
  return ps;
}

std::string param_name(const ::testing::TestParamInfo<std::tuple<size_t, DeviceType>>& info) {
  const DeviceType d = std::get<1>(info.param);
  return cases()[std::get<0>(info.param)].name + (d == DeviceType::CPU ? "_cpu" : d == DeviceType::Meta ? "_meta" : "_cuda");
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(All, OptimLeanBackends, ::testing::ValuesIn(params()), param_name);
