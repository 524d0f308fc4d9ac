// The norms' backward on the GPU when dx and the parameter gradients are wanted together: one
// pass computes dx and the dw/db column sums (norm_bwd_fused_kernel, rows of at most 1024
// columns, 2048 for RMSNorm, the cuBLASLt workspace held), wider rows take the separate passes. Every case
// against the CPU backend, and twice on the GPU for bitwise determinism: LayerNorm, RMSNorm and
// their fused residual adds (whose dx adds the sum's own gradient), at GPT-2's 16384 rows and
// at few rows (fewer than a block's warps), widths that fill every lane's packs (768, 1024) and
// widths that leave lanes idle (576, 1000, 64), 16-bit and f32 rows, and bf16 rows with f32
// parameters under autocast (f32 gradients out of the sums). Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>

#include "leantrain/autocast.h"
#include "leantrain/autograd.h"
#include "leantrain/cuda_info.h"
#include "leantrain/ops.h"
#include "unit/cuda_workspace.h"
#include "unit/rel_error.h"

using namespace lt;

namespace {

enum class Kind { LayerNorm, RmsNorm, AddLayerNorm, AddRmsNorm };

std::string kind_name(Kind k) {
  switch (k) {
    case Kind::LayerNorm: return "layer_norm";
    case Kind::RmsNorm: return "rms_norm";
    case Kind::AddLayerNorm: return "add_layer_norm";
    default: return "add_rms_norm";
  }
}

struct Grads {
  std::vector<std::vector<float>> v;  // dx (and d residual), dw, db
};

// The op on `dev`: rows of dtype `rows`, parameters of `params` (f32 under bf16 autocast when
// they differ), gradients of every input from fixed upstream gradients of y (and of the sum).
Grads run(Kind kind, int64_t N, int64_t C, DType rows, DType params, Device dev) {
  Generator g(1000 + uint64_t(N) * 7 + uint64_t(C));
  auto leaf = [&](const Shape& s, DType dt, float sd) {
    Tensor t = randn(s, g, sd, dt).to(dev).detach();
    t.set_requires_grad(true);
    return t;
  };
  Tensor x = leaf({N, C}, rows, 1.0f), r = leaf({N, C}, rows, 1.0f);
  Tensor w = leaf({C}, params, 0.5f), b = leaf({C}, params, 0.5f);
  const Tensor gy = randn({N, C}, g, 1.0f, rows).to(dev), gs = randn({N, C}, g, 1.0f, rows).to(dev);
  const bool add_kind = kind == Kind::AddLayerNorm || kind == Kind::AddRmsNorm;
  const bool has_bias = kind == Kind::LayerNorm || kind == Kind::AddLayerNorm;
  {
    std::optional<AutocastGuard> ac;
    if (params != rows) ac.emplace(rows);
    const Tensor wc = autocast_like(w, x), bc = autocast_like(b, x);
    Tensor loss;
    switch (kind) {
      case Kind::LayerNorm: loss = sum_all(mul(layer_norm(x, wc, bc), gy)); break;
      case Kind::RmsNorm: loss = sum_all(mul(rms_norm(x, wc), gy)); break;
      case Kind::AddLayerNorm: {
        const AddNormResult o = add_layer_norm(x, r, wc, bc);
        loss = add(sum_all(mul(o.y, gy)), sum_all(mul(o.sum, gs)));
        break;
      }
      case Kind::AddRmsNorm: {
        const AddNormResult o = add_rms_norm(x, r, wc);
        loss = add(sum_all(mul(o.y, gy)), sum_all(mul(o.sum, gs)));
        break;
      }
    }
    loss.backward();
  }
  Grads out;
  std::vector<Tensor> want{x};
  if (add_kind) want.push_back(r);
  want.push_back(w);
  if (has_bias) want.push_back(b);
  for (const Tensor& t : want) {
    EXPECT_TRUE(t.grad().defined());
    out.v.push_back(t.grad().defined() ? t.grad().to(Device::cpu()).to_float_vector() : std::vector<float>{});
  }
  return out;
}

class NormFusedBackward : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
    ASSERT_NO_FATAL_FAILURE(test::hold_cublaslt_workspace());
  }

  static void check(Kind kind, int64_t N, int64_t C, DType rows, DType params) {
    SCOPED_TRACE(kind_name(kind) + " " + std::to_string(N) + "x" + std::to_string(C) + " rows " +
                 dtype_name(rows) + " params " + dtype_name(params));
    const Grads ref = run(kind, N, C, rows, params, Device::cpu());
    const Grads got = run(kind, N, C, rows, params, Device::cuda());
    const Grads again = run(kind, N, C, rows, params, Device::cuda());
    ASSERT_EQ(got.v.size(), ref.v.size());
    const double tol = rows == DType::F32 ? 1e-5 : 1e-2;
    for (size_t i = 0; i < ref.v.size(); ++i) {
      EXPECT_LE(test::rel_error(got.v[i], ref.v[i]), tol) << "gradient " << i;
      EXPECT_TRUE(got.v[i] == again.v[i]) << "gradient " << i << ": two GPU runs differ";
    }
  }
};

}  // namespace

TEST_F(NormFusedBackward, Gpt2RowsEveryNormKind) {
  for (Kind k : {Kind::LayerNorm, Kind::AddLayerNorm, Kind::RmsNorm, Kind::AddRmsNorm})
    for (DType dt : {DType::BF16, DType::F32}) check(k, 16384, 768, dt, dt);
}

TEST_F(NormFusedBackward, Bf16RowsWithF32ParametersUnderAutocast) {
  for (Kind k : {Kind::LayerNorm, Kind::AddLayerNorm, Kind::RmsNorm}) check(k, 16384, 768, DType::BF16, DType::F32);
}

TEST_F(NormFusedBackward, WidthsThatLeaveLanesIdleAndTheLimit) {
  // 576 and 1000: the last pack step has idle lanes; 1024: every lane's 4 steps; 1032: over
  // LayerNorm's limit (the separate passes), within RMSNorm's; 64: two packs of 16-bit rows, so
  // 24 idle lanes.
  for (int64_t C : {576, 1000, 1024, 1032, 64}) {
    check(Kind::LayerNorm, 4099, C, DType::BF16, DType::BF16);
    check(Kind::AddLayerNorm, 4099, C, DType::F16, DType::F16);
    check(Kind::RmsNorm, 4099, C, DType::F32, DType::F32);
  }
}

TEST_F(NormFusedBackward, FewerRowsThanABlockHasWarps) {
  for (int64_t N : {1, 3, 5}) {
    check(Kind::LayerNorm, N, 768, DType::BF16, DType::BF16);
    check(Kind::AddRmsNorm, N, 1024, DType::BF16, DType::BF16);
  }
}

TEST_F(NormFusedBackward, RmsNormRowsUpTo2048Columns) {
  // RMSNorm keeps no db sums, so its one pass takes rows twice as wide: TinyLlama's 2048 (4096
  // rows, bf16 under autocast and plain; its fused residual add), 1536 and 2000 (idle lanes in the
  // last steps), 2056 (over the limit: the separate passes), and f32 rows of 2048 (16 steps of 4).
  check(Kind::RmsNorm, 4096, 2048, DType::BF16, DType::F32);
  check(Kind::AddRmsNorm, 4096, 2048, DType::BF16, DType::BF16);
  check(Kind::RmsNorm, 4096, 2048, DType::BF16, DType::BF16);
  for (int64_t C : {1536, 2000, 2056}) check(Kind::AddRmsNorm, 1031, C, DType::BF16, DType::BF16);
  check(Kind::RmsNorm, 1031, 2048, DType::F32, DType::F32);
  check(Kind::RmsNorm, 3, 2048, DType::BF16, DType::F32);
}
