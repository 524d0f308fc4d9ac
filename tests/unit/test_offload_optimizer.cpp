// OffloadOptimizer (--offload optimizer's optimizer, src/offload/offload_optimizer.*) on the CPU
// backend: the same bits as AdamW, Lion and SGD with f32 master weights (16-bit parameters) or
// without (f32), its
// state in the pinned-host account (OptimizerState) and not in the device's, its bucket buffers
// counted there too, and a state dict that resumes to the same bits.
#include <gtest/gtest.h>

#include <cstring>

#include "error_of.h"
#include "leantrain/memory.h"
#include "leantrain/ops.h"
#include "leantrain/optim.h"
#include "leantrain/optim_lean.h"
#include "offload/offload_optimizer.h"
#include "offload_test_params.h"

using namespace lt;
using namespace lt::offload;
using lt::test::error_of;

namespace {

const std::vector<Shape> kShapes = {{7, 5}, {33}, {16, 16}, {1}, {3, 101}};

std::vector<NamedTensor> make_params(DType dt, int seed) { return optim_test::make_params(kShapes, dt, seed); }
using optim_test::set_grads;
using optim_test::two_groups;
using optim_test::same_bits;

AdamWOptions adamw_options() {
  AdamWOptions o;
  o.lr = 1e-2;
  o.weight_decay = 0.1;
  return o;
}

std::unique_ptr<Optimizer> reference_for(const std::string& kind, std::vector<ParamGroup> groups) {
  if (kind == "lion") {
    LionOptions o;
    o.lr = 3e-3;
    o.weight_decay = 0.1;
    return std::make_unique<Lion>(std::move(groups), o);
  }
  if (kind == "sgd") {
    SgdOptions o;
    o.lr = 5e-2;
    o.momentum = 0.9;
    o.nesterov = true;
    o.weight_decay = 1e-2;
    return std::make_unique<SGD>(std::move(groups), o);
  }
  if (kind == "adamw8bit") {
    AdamW8bitOptions o;
    o.lr = 1e-2;
    o.weight_decay = 0.1;
    o.min_8bit_size = 64;  // the 256- and 303-element parameters quantised, the others f32
    return std::make_unique<AdamW8bit>(std::move(groups), o);
  }
  if (kind == "lion8bit") {
    Lion8bitOptions o;
    o.lr = 3e-3;
    o.weight_decay = 0.1;
    o.min_8bit_size = 64;
    return std::make_unique<Lion8bit>(std::move(groups), o);
  }
  return std::make_unique<AdamW>(std::move(groups), adamw_options());
}

OffloadOptions offload_for(const std::string& kind) {
  OffloadOptions o;
  o.kind = *choice_named<OptimizerKind>(kind);
  o.adamw = adamw_options();
  o.lion.lr = 3e-3;
  o.lion.weight_decay = 0.1;
  o.sgd.lr = 5e-2;
  o.sgd.momentum = 0.9;
  o.sgd.nesterov = true;
  o.sgd.weight_decay = 1e-2;
  o.adamw8bit.lr = 1e-2;
  o.adamw8bit.weight_decay = 0.1;
  o.adamw8bit.min_8bit_size = 64;
  o.lion8bit.lr = 3e-3;
  o.lion8bit.weight_decay = 0.1;
  o.lion8bit.min_8bit_size = 64;
  return o;
}

// Four steps of both optimizers on equal parameters and gradients; parameters, state and master
// copies compared bit for bit after each.
void check_against_reference(const std::string& kind, DType dt, int64_t bucket_bytes, int threads,
                             const std::vector<Shape>& shapes = kShapes) {
  SCOPED_TRACE(kind + " " + dtype_name(dt) + " bucket " + std::to_string(bucket_bytes) + " threads " +
               std::to_string(threads));
  std::vector<NamedTensor> ref = optim_test::make_params(shapes, dt, 1), off = optim_test::make_params(shapes, dt, 1);
  std::unique_ptr<Optimizer> reference = reference_for(kind, two_groups(ref));
  reference->set_master_weights(dt != DType::F32);
  OffloadOptions o = offload_for(kind);
  o.bucket_bytes = bucket_bytes;
  o.threads = threads;
  OffloadOptimizer offloaded(two_groups(off), o);
  const std::vector<std::string> states =
      kind == "adamw"       ? std::vector<std::string>{"exp_avg", "exp_avg_sq"}
      : kind == "lion"      ? std::vector<std::string>{"exp_avg"}
      : kind == "adamw8bit" ? std::vector<std::string>{"exp_avg", "exp_avg_absmax", "exp_avg_sq", "exp_avg_sq_absmax"}
      : kind == "lion8bit"  ? std::vector<std::string>{"exp_avg", "exp_avg_absmax"}
                            : std::vector<std::string>{"momentum_buffer"};
  for (int t = 1; t <= 4; ++t) {
    set_grads(ref, t);
    set_grads(off, t);
    const float scale = t == 3 ? 0.25f : 1.0f;
    reference->step(scale);
    offloaded.step(scale);
    const OptimizerStateDict rs = reference->state_dict(), os = offloaded.state_dict();
    for (size_t i = 0; i < ref.size(); ++i) {
      const std::string& n = ref[i].first;
      ASSERT_TRUE(same_bits(ref[i].second, off[i].second)) << n << " after step " << t;
      for (const std::string& st : states)
        ASSERT_TRUE(same_bits(rs.tensors.at(n + "." + st), os.tensors.at(n + "." + st))) << n << "." << st;
      const Tensor want_master = dt == DType::F32 ? ref[i].second : rs.tensors.at(n + ".master");
      ASSERT_TRUE(same_bits(want_master, os.tensors.at(n + ".master_f32"))) << n;
    }
  }
}

}  // namespace

TEST(OffloadOptimizer, BitwiseEqualToMasterWeightOptimizer) {
  for (const char* kind : {"adamw", "lion", "sgd", "adamw8bit", "lion8bit"})
    for (DType dt : {DType::BF16, DType::F16, DType::F32})
      for (int64_t bucket : {int64_t(32) << 20, int64_t(256)})  // one bucket; one parameter per bucket
        for (int threads : {1, 3}) {
          check_against_reference(kind, dt, bucket, threads);
          if (HasFatalFailure()) return;
        }
}

// The 8-bit host step cuts a parameter into runs of whole 256-element blocks, one per host thread
// (at least simd::kMinChunk = 16K elements each): 210,000 and 65,537 elements (partial last
// blocks) on 3 threads and 1 give the reference's bits.
TEST(OffloadOptimizer, EightBitStepOnThreadsIsBitwiseTheReference) {
  const std::vector<Shape> shapes = {{700, 300}, {33}, {65537}};
  for (const char* kind : {"adamw8bit", "lion8bit"})
    for (int threads : {3, 1}) {
      check_against_reference(kind, DType::BF16, int64_t(32) << 20, threads, shapes);
      if (HasFatalFailure()) return;
    }
}

// State and master in the pinned-host account (OptimizerState), gradient bucket (Gradient) and
// staging buffer (Workspace) there too, nothing of it in the device account.
TEST(OffloadOptimizer, StateIsCountedAsPinnedHost) {
  Allocator& host = pinned_host_allocator(Device::cpu());
  Allocator& dev = allocator_for(Device::cpu());
  const MemoryStats h0 = host.stats();
  std::vector<NamedTensor> ps = make_params(DType::BF16, 3);
  set_grads(ps, 1);
  const int64_t dev_state0 = dev.stats().category[int(Category::OptimizerState)].current;
  {
    OffloadOptions o;
    o.adamw = adamw_options();
    OffloadOptimizer opt({ParamGroup{ps, std::nullopt}}, o);
    opt.step();
    int64_t state = 0, bucket = 0;
    for (const auto& [n, p] : ps) {
      const int64_t part = (p.numel() * 4 + 63) / 64 * 64;
      state += (3 * part + 511) / 512 * 512;  // one buffer per parameter, rounded as the account rounds
      bucket += (p.nbytes() + 63) / 64 * 64;
    }
    const MemoryStats h = host.stats();
    EXPECT_EQ(h.category[int(Category::OptimizerState)].current - h0.category[int(Category::OptimizerState)].current,
              state);
    EXPECT_EQ(h.category[int(Category::Gradient)].current - h0.category[int(Category::Gradient)].current,
              (bucket + 511) / 512 * 512);
    EXPECT_EQ(h.category[int(Category::Workspace)].current - h0.category[int(Category::Workspace)].current,
              (bucket + 511) / 512 * 512);
    EXPECT_EQ(dev.stats().category[int(Category::OptimizerState)].current, dev_state0);
  }
  EXPECT_EQ(host.stats().allocated_bytes.current, h0.allocated_bytes.current);  // all returned
}

TEST(OffloadOptimizer, StateDictResumesToTheSameBits) {
  std::vector<NamedTensor> a = make_params(DType::BF16, 5), b = make_params(DType::BF16, 5);
  OffloadOptions o;
  o.adamw = adamw_options();
  OffloadOptimizer first(two_groups(a), o);
  for (int t = 1; t <= 2; ++t) set_grads(a, t), first.step();
  // b resumes: its parameters take a's values, its optimizer a's state.
  for (size_t i = 0; i < a.size(); ++i) copy_(b[i].second, a[i].second);
  OffloadOptimizer resumed(two_groups(b), o);
  resumed.load_state_dict(first.state_dict());
  set_grads(a, 3), first.step();
  set_grads(b, 3), resumed.step();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(same_bits(a[i].second, b[i].second)) << a[i].first;
}

TEST(OffloadOptimizer, RefusesWhatItCannotDo) {
  std::vector<NamedTensor> ps = make_params(DType::BF16, 7);
  set_grads(ps, 1);
  OffloadOptions o;
  o.adamw = adamw_options();
  {
    OffloadOptimizer opt({ParamGroup{ps, std::nullopt}}, o);
    opt.set_stochastic_rounding(true, 1);
    EXPECT_NE(error_of([&] { opt.step(); }).find("stochastic rounding"), std::string::npos);
  }
  {
    OffloadOptimizer opt({ParamGroup{ps, std::nullopt}}, o);
    opt.set_master_weights(true);
    EXPECT_NE(error_of([&] { opt.step(); }).find("--master-weights"), std::string::npos);
  }
  std::vector<NamedTensor> f64 = {{"w", from_vector(std::vector<double>{1.0, 2.0}, {2})}};
  f64[0].second.set_grad(from_vector(std::vector<double>{1.0, 2.0}, {2}));
  OffloadOptimizer opt({ParamGroup{f64, std::nullopt}}, o);
  EXPECT_NE(error_of([&] { opt.step(); }).find("f64 parameters"), std::string::npos);
  o.adamw.state_dtype = DType::BF16;
  EXPECT_NE(error_of([&] { OffloadOptimizer bad({ParamGroup{ps, std::nullopt}}, o); }).find("state dtype"),
            std::string::npos);
  o.kind = *choice_named<OptimizerKind>("adamw8bit");
  {
    OffloadOptimizer opt({ParamGroup{ps, std::nullopt}}, o);
    opt.set_stochastic_rounding(true, 1);
    EXPECT_NE(error_of([&] { opt.step(); }).find("stochastic rounding"), std::string::npos);
  }
}
