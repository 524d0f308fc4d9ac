// OffloadOptimizer's draining during backward (offload_optimizer.h, "Draining during backward"):
// on the CPU the gradients land in the pinned area as backward completes them and the update
// gives the bits of the synchronous path; on meta with the CUDA allocator simulated, the copy
// stream's uses and the compute stream's waits (program order only) let the device reuse the
// drained gradients' memory during backward, and only when the waits come.
#include <gtest/gtest.h>

#include <cstring>

#include "leantrain/autograd.h"
#include "leantrain/memory.h"
#include "leantrain/ops.h"
#include "memory/host_allocators.h"
#include "offload/offload_optimizer.h"
#include "optim_test_values.h"

using namespace lt;
using namespace lt::offload;

namespace {

const std::vector<Shape> kShapes = {{7, 5}, {33}, {16, 16}, {1}, {3, 101}};

std::vector<NamedTensor> make_params(DType dt) {
  std::vector<NamedTensor> out;
  for (size_t i = 0; i < kShapes.size(); ++i) {
    Tensor t = from_vector(optim_test::values(numel(kShapes[i]), 1 + int(i), 0), kShapes[i], DType::F32).to(dt);
    t.set_requires_grad(true);
    out.push_back({"p" + std::to_string(i), t});
  }
  return out;
}

Tensor grad_values(const Tensor& p, size_t i, int t) {
  return from_vector(optim_test::values(p.numel(), 10 + int(i), t), p.shape(), DType::F32).to(p.dtype());
}

// A backward that gives parameter i the gradient grad_values(i, t): d/dp sum(p * w) = w.
void backward_with_grads(const std::vector<NamedTensor>& ps, int t) {
  Tensor loss;
  for (size_t i = 0; i < ps.size(); ++i) {
    Tensor term = sum_all(mul(ps[i].second, grad_values(ps[i].second, i, t)));
    loss = loss.defined() ? add(loss, term) : term;
  }
  loss.backward();
}

bool same_bits(const Tensor& a, const Tensor& b) {
  Tensor x = a.contiguous(), y = b.contiguous();
  return x.dtype() == y.dtype() && x.shape() == y.shape() && std::memcmp(x.raw_data(), y.raw_data(), size_t(x.nbytes())) == 0;
}

OffloadOptions options(const std::string& kind, int64_t bucket_bytes) {
  OffloadOptions o;
  o.kind = *choice_named<OptimizerKind>(kind);
  o.adamw.lr = 1e-2;
  o.adamw.weight_decay = 0.1;
  o.lion.lr = 3e-3;
  o.sgd.lr = 5e-2;
  o.sgd.momentum = 0.9;
  o.adamw8bit.min_8bit_size = o.lion8bit.min_8bit_size = 64;
  o.bucket_bytes = bucket_bytes;
  o.threads = 2;
  return o;
}

}  // namespace

TEST(OffloadGradDrain, BitwiseEqualToTheSynchronousPath) {
  for (const char* kind : {"adamw", "lion", "sgd", "adamw8bit", "lion8bit"})
    for (DType dt : {DType::BF16, DType::F16, DType::F32})
      for (int64_t bucket : {int64_t(32) << 20, int64_t(256)}) {
        SCOPED_TRACE(std::string(kind) + " " + dtype_name(dt) + " bucket " + std::to_string(bucket));
        std::vector<NamedTensor> sync_p = make_params(dt), drain_p = make_params(dt);
        OffloadOptimizer sync({ParamGroup{sync_p, {}}}, options(kind, bucket));
        OffloadOptimizer drained({ParamGroup{drain_p, {}}}, options(kind, bucket));
        drained.drain_during_backward();
        for (int t = 1; t <= 3; ++t) {
          for (size_t i = 0; i < sync_p.size(); ++i) sync_p[i].second.set_grad(grad_values(sync_p[i].second, i, t));
          drained.set_draining(true);
          backward_with_grads(drain_p, t);
          drained.finish_backward();
          for (size_t i = 0; i < drain_p.size(); ++i) {
            const Tensor g = drain_p[i].second.grad();
            ASSERT_TRUE(g.defined());
            // The gradient lives in the pinned area now (counted in the pinned-host account).
            EXPECT_EQ(g.storage()->allocator, &pinned_host_allocator(Device::cpu()));
            ASSERT_TRUE(same_bits(g, grad_values(drain_p[i].second, i, t)));
          }
          const float scale = t == 2 ? 0.25f : 1.0f;  // a clip coefficient
          sync.step(scale);
          drained.step(scale);
          sync.zero_grad(true);
          drained.zero_grad(true);
          for (size_t i = 0; i < sync_p.size(); ++i)
            ASSERT_TRUE(same_bits(sync_p[i].second, drain_p[i].second)) << sync_p[i].first << " step " << t;
          const OptimizerStateDict a = sync.state_dict(), b = drained.state_dict();
          for (const auto& [name, v] : a.tensors) ASSERT_TRUE(same_bits(v, b.tensors.at(name))) << name;
        }
        EXPECT_EQ(drained.drained(), int64_t(3 * drain_p.size()));
      }
}

// Early steps (no clipping, no loss scaling): from the second step on, each bucket is stepped by
// the drain's thread during backward; the bits are still the synchronous path's.
TEST(OffloadGradDrain, EarlyStepsBitwiseEqualToTheSynchronousPath) {
  for (const char* kind : {"adamw", "lion", "sgd", "adamw8bit"})
    for (DType dt : {DType::BF16, DType::F32})
      for (int64_t bucket : {int64_t(32) << 20, int64_t(256)}) {
        SCOPED_TRACE(std::string(kind) + " " + dtype_name(dt) + " bucket " + std::to_string(bucket));
        std::vector<NamedTensor> sync_p = make_params(dt), drain_p = make_params(dt);
        OffloadOptimizer sync({ParamGroup{sync_p, {}}}, options(kind, bucket));
        OffloadOptimizer drained({ParamGroup{drain_p, {}}}, options(kind, bucket));
        drained.drain_during_backward();
        drained.set_early_step(true);
        for (int t = 1; t <= 3; ++t) {
          for (size_t i = 0; i < sync_p.size(); ++i) sync_p[i].second.set_grad(grad_values(sync_p[i].second, i, t));
          drained.set_draining(true);
          backward_with_grads(drain_p, t);
          drained.finish_backward();
          // The gradients stay intact for the norm while the early steps write elsewhere.
          for (size_t i = 0; i < drain_p.size(); ++i)
            ASSERT_TRUE(same_bits(drain_p[i].second.grad(), grad_values(drain_p[i].second, i, t)));
          sync.step();
          drained.step();
          sync.zero_grad(true);
          drained.zero_grad(true);
          for (size_t i = 0; i < sync_p.size(); ++i)
            ASSERT_TRUE(same_bits(sync_p[i].second, drain_p[i].second)) << sync_p[i].first << " step " << t;
          const OptimizerStateDict a = sync.state_dict(), b = drained.state_dict();
          for (const auto& [name, v] : a.tensors) ASSERT_TRUE(same_bits(v, b.tensors.at(name))) << name;
        }
        // The first step creates the states (no early step possible); the next two go early.
        EXPECT_EQ(drained.stepped_early(), int64_t(2 * drain_p.size()));
      }
}

// Not armed (an earlier micro-batch of an accumulation): the gradients stay where they are and
// accumulate; the armed backward then drains the sum.
TEST(OffloadGradDrain, DrainsOnlyWhileArmed) {
  std::vector<NamedTensor> ps = make_params(DType::F32);
  OffloadOptimizer opt({ParamGroup{ps, {}}}, options("adamw", 1 << 20));
  opt.drain_during_backward();
  backward_with_grads(ps, 1);
  EXPECT_EQ(opt.drained(), 0);
  EXPECT_NE(ps[0].second.grad().storage()->allocator, &pinned_host_allocator(Device::cpu()));
  opt.set_draining(true);
  backward_with_grads(ps, 2);
  opt.finish_backward();
  EXPECT_EQ(opt.drained(), int64_t(ps.size()));
  for (size_t i = 0; i < ps.size(); ++i) {
    const Tensor want = add(grad_values(ps[i].second, i, 1), grad_values(ps[i].second, i, 2));
    EXPECT_TRUE(same_bits(ps[i].second.grad(), want)) << i;
  }
  // finish_backward disarmed it: the next backward keeps its gradients on the device.
  opt.zero_grad(true);
  backward_with_grads(ps, 3);
  EXPECT_EQ(opt.drained(), int64_t(ps.size()));
}

// Eight 4 MiB gradients on the simulated CUDA allocator. With 4 MiB buckets the compute stream
// waits for the older copies during backward and the allocator hands their memory out again;
// with one bucket larger than everything it waits only at the end, so the freed gradients cannot
// be reused before and the device reserves more.
TEST(OffloadGradDrain, CopyStreamWaitsLetTheDeviceReuseGradients) {
  auto reserved_peak = [](int64_t bucket) {
    set_allocator(Device::meta(), make_simulated_cuda_allocator());
    int64_t peak = 0, drained = 0;
    {
      std::vector<NamedTensor> ps;
      for (int i = 0; i < 8; ++i) {
        Tensor t = empty({1 << 20}, DType::F32, Device::meta());
        t.set_requires_grad(true);
        ps.push_back({"w" + std::to_string(i), t});
      }
      OffloadOptimizer opt({ParamGroup{ps, {}}}, options("adamw", bucket));
      opt.drain_during_backward();
      opt.set_draining(true);
      Tensor loss;
      for (auto& [n, p] : ps) {
        Tensor term = sum_all(mul(p, p));
        loss = loss.defined() ? add(loss, term) : term;
      }
      loss.backward();
      opt.finish_backward();
      opt.step();
      drained = opt.drained();
      peak = allocator_for(Device::meta()).stats().reserved_bytes.peak;
    }
    EXPECT_EQ(drained, 8);
    set_allocator(Device::meta(), std::make_unique<MetaAllocator>());
    return peak;
  };
  const int64_t bucketed = reserved_peak(4 << 20), at_end = reserved_peak(int64_t(1) << 30);
  EXPECT_EQ(bucketed, reserved_peak(4 << 20));  // program order only: the same bytes twice
  EXPECT_LT(bucketed, at_end);
}
