// cuDNN's fused attention (--attention-kernel cudnn, src/backend/cuda/cudnn_attention.cpp) on the
// GPU: output, lse, dq, dk and dv against the CPU reference in f64 and against leantrain's own
// kernels, through scaled_dot_product_attention (separate q, k, v; also cross-attention with
// Tq != Tk) and self_attention_packed (q, k, v as strided views of one fused qkv, dq, dk, dv
// written into one dqkv); causal and not, bf16 and f16, head dims 64, 128 and 256 (and 32), T off
// multiples of 64 and 128, B > 1, H > 1, grouped-query and multi-query heads, a given scale.
// Under cudnn a failure to run cuDNN is an error, so these fail rather than quietly test
// leantrain's kernels. Also: either backward takes either forward's lse (the fallback of auto
// relies on it); auto falls back where the loaded cuDNN cannot run a backward. Skipped without a
// GPU; prints the cuDNN version.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/attention_workspace.h"
#include "backend/backend.h"
#include "leantrain/autograd.h"
#include "leantrain/cuda_info.h"
#include "leantrain/error.h"
#include "leantrain/ops.h"
#include "unit/cuda_workspace.h"
#include "unit/rel_error.h"
#ifdef LEANTRAIN_HAVE_CUDA
#include "backend/cuda/cudnn_api.h"
#endif

using namespace lt;

namespace {

using Vals = std::vector<double>;

class KernelScope {
 public:
  explicit KernelScope(AttentionKernel k) : prev_(attention_kernel()) { set_attention_kernel(k); }
  ~KernelScope() { set_attention_kernel(prev_); }

 private:
  AttentionKernel prev_;
};

struct Case {
  int64_t B, H, Hkv, Tq, Tk, D;
  bool causal;
  double scale = 0.0;
};

std::string case_str(const Case& c) {
  return "B " + std::to_string(c.B) + " H " + std::to_string(c.H) + " Hkv " + std::to_string(c.Hkv) + " Tq " +
         std::to_string(c.Tq) + " Tk " + std::to_string(c.Tk) + " D " + std::to_string(c.D) +
         (c.causal ? " causal" : "") + (c.scale > 0 ? " scale " + std::to_string(c.scale) : "");
}

size_t cudnn_version() {
#ifdef LEANTRAIN_HAVE_CUDA
  return lt::cuda::cudnn().cudnnGetVersion();
#else
  return 0;
#endif
}

// Whether the loaded cuDNN runs this case's backward (before 9.16 key lengths must be multiples
// of 128 without a padding mask; src/backend/cuda/cudnn_attention.cpp).
bool cudnn_runs_backward(const Case& c) { return cudnn_version() >= 91600 || c.Tk % 128 == 0; }

struct Inputs {
  Vals q, k, v, g;
};
// Drawn in f64, then rounded to dt so that every side sees the values dt stores.
Inputs draw(const Case& c, uint64_t seed, DType dt) {
  Generator gen(seed);
  auto r = [&](Shape s) { return randn(s, gen, 1.0f, DType::F64).to(dt).to_double_vector(); };
  return {r({c.B, c.H, c.Tq, c.D}), r({c.B, c.Hkv, c.Tk, c.D}), r({c.B, c.Hkv, c.Tk, c.D}), r({c.B, c.H, c.Tq, c.D})};
}

struct Outcome {
  Vals out, dq, dk, dv;
};

Outcome run_sdpa(const Case& c, const Inputs& in, DType dt, Device dev) {
  Tensor q = from_vector(in.q, {c.B, c.H, c.Tq, c.D}, dt, dev).set_requires_grad(true);
  Tensor k = from_vector(in.k, {c.B, c.Hkv, c.Tk, c.D}, dt, dev).set_requires_grad(true);
  Tensor v = from_vector(in.v, {c.B, c.Hkv, c.Tk, c.D}, dt, dev).set_requires_grad(true);
  Tensor y = scaled_dot_product_attention(q, k, v, c.causal, Tensor(), c.scale);
  y.backward(from_vector(in.g, y.shape(), dt, dev));
  return {y.to_double_vector(), q.grad().to_double_vector(), k.grad().to_double_vector(), v.grad().to_double_vector()};
}

double tolerance(DType dt) { return dt == DType::F16 ? 5e-3 : 1e-2; }
double rel(const Vals& a, const Vals& b) { return test::rel_error(a, b, 1e-6); }

void expect_close(const Outcome& got, const Outcome& want, double tol, const char* against) {
  EXPECT_LE(rel(got.out, want.out), tol) << "output against " << against;
  EXPECT_LE(rel(got.dq, want.dq), tol) << "dq against " << against;
  EXPECT_LE(rel(got.dk, want.dk), tol) << "dk against " << against;
  EXPECT_LE(rel(got.dv, want.dv), tol) << "dv against " << against;
}

// GPT-2's shape scaled down, T off the 64- and 128-row tiles, grouped and multi-query heads, a
// head dim of 128, non-causal cross-attention with Tq != Tk, a scale given.
const std::vector<Case>& cases() {
  static const std::vector<Case> cs = {
      {1, 1, 1, 128, 128, 64, true},  {2, 4, 4, 256, 256, 64, true},   {2, 4, 4, 77, 77, 64, true},
      {2, 3, 3, 200, 200, 128, false}, {1, 8, 2, 256, 256, 64, true},  {2, 4, 1, 130, 130, 128, true},
      {1, 4, 4, 96, 96, 128, false},   {2, 4, 2, 64, 192, 64, false},  {2, 2, 2, 1024, 1024, 64, true},
      {2, 4, 4, 128, 128, 32, true, 0.3}, {1, 8, 8, 384, 384, 128, true},
      // head dim 256 (Gemma 3, Qwen3.5's gated attention): grouped heads, T on and off the tiles
      {1, 8, 2, 256, 256, 256, true},  {2, 2, 1, 130, 130, 256, true},  {1, 2, 2, 128, 128, 256, false},
  };
  return cs;
}

void print_version_once() {
  static bool done = false;
  if (!done) std::printf("[ cuDNN    ] version %zu\n", cudnn_version());
  done = true;
}

}  // namespace

// Each case: the CPU in f64, leantrain's CUDA kernels, and cuDNN (strict). A case whose backward
// the loaded cuDNN does not run compares the forward under cudnn, and the whole under auto.
TEST(CudnnAttention, MatchesCpuReferenceAndLeantrainKernels) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  print_version_once();
  ASSERT_NO_FATAL_FAILURE(test::hold_cublaslt_workspace());
  uint64_t seed = 700;
  for (const Case& c : cases())
    for (DType dt : {DType::BF16, DType::F16}) {
      SCOPED_TRACE(case_str(c) + " " + dtype_name(dt));
      const Inputs in = draw(c, ++seed, dt);
      Outcome ref, lean, cud;
      {
        KernelScope k(AttentionKernel::Leantrain);
        ref = run_sdpa(c, in, DType::F64, Device::cpu());
        lean = run_sdpa(c, in, dt, Device::cuda());
      }
      {
        KernelScope k(cudnn_runs_backward(c) ? AttentionKernel::Cudnn : AttentionKernel::Auto);
        ASSERT_NO_THROW(cud = run_sdpa(c, in, dt, Device::cuda()));
      }
      expect_close(cud, ref, tolerance(dt), "the CPU");
      expect_close(cud, lean, 2 * tolerance(dt), "leantrain's kernels");
      expect_close(lean, ref, tolerance(dt), "the CPU (leantrain)");
    }
}

// The packed layout: q, k, v are [B, H, T, D] views of qkv [B, T, (H + 2 Hkv) D] with row stride
// (H + 2 Hkv) D, and the backward writes dq, dk, dv into one dqkv.
TEST(CudnnAttention, PackedMatchesCpuReference) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  ASSERT_NO_FATAL_FAILURE(test::hold_cublaslt_workspace());
  uint64_t seed = 800;
  for (Case c : cases()) {
    c.Tk = c.Tq;
    for (DType dt : {DType::BF16, DType::F16}) {
      SCOPED_TRACE(case_str(c) + " " + dtype_name(dt));
      const int64_t W = (c.H + 2 * c.Hkv) * c.D;
      Generator gen(++seed);
      const Vals qkv = randn({c.B, c.Tq, W}, gen, 1.0f, DType::F64).to(dt).to_double_vector();
      const Vals g = randn({c.B, c.Tq, c.H * c.D}, gen, 1.0f, DType::F64).to(dt).to_double_vector();
      auto run = [&](DType t, Device dev) {
        Tensor x = from_vector(qkv, {c.B, c.Tq, W}, t, dev).set_requires_grad(true);
        AttentionMask m;
        m.causal = c.causal;
        Tensor y = self_attention_packed(x, c.H, c.Hkv, m, c.scale);
        y.backward(from_vector(g, y.shape(), t, dev));
        return std::pair<Vals, Vals>{y.to_double_vector(), x.grad().to_double_vector()};
      };
      std::pair<Vals, Vals> ref, cud;
      {
        KernelScope k(AttentionKernel::Leantrain);
        ref = run(DType::F64, Device::cpu());
      }
      {
        KernelScope k(cudnn_runs_backward(c) ? AttentionKernel::Cudnn : AttentionKernel::Auto);
        ASSERT_NO_THROW(cud = run(dt, Device::cuda()));
      }
      EXPECT_LE(rel(cud.first, ref.first), tolerance(dt)) << "output";
      EXPECT_LE(rel(cud.second, ref.second), tolerance(dt)) << "dqkv";
    }
  }
}

// cuDNN's Stats is leantrain's lse (natural log of the scaled scores' sum of exponentials), so
// either backward takes either forward's saved tensors: the backend ops called directly, strict.
TEST(CudnnAttention, LseIsLeantrainsAndTheTwoPathsMix) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  ASSERT_NO_FATAL_FAILURE(test::hold_cublaslt_workspace());
  Backend& gpu = backend_for(Device::cuda());
  for (const Case& c : {Case{2, 4, 4, 256, 256, 64, true}, Case{2, 8, 2, 128, 128, 128, false}})
    for (DType dt : {DType::BF16, DType::F16}) {
      SCOPED_TRACE(case_str(c) + " " + dtype_name(dt));
      const Inputs in = draw(c, 900, dt);
      const float scale = float(1.0 / std::sqrt(double(c.D)));
      auto on = [&](const Vals& v, Shape s, DType t, Device d) { return from_vector(v, s, t, d); };
      const Shape qs{c.B, c.H, c.Tq, c.D}, ks{c.B, c.Hkv, c.Tk, c.D}, ls{c.B, c.H, c.Tq};
      // The reference lse, in f64 on the CPU.
      Tensor out_ref = Tensor::empty(qs, DType::F64), lse_ref = Tensor::empty(ls, DType::F64);
      backend_for(Device::cpu())
          .attention_fwd(out_ref, lse_ref, on(in.q, qs, DType::F64, Device::cpu()), on(in.k, ks, DType::F64, Device::cpu()),
                         on(in.v, ks, DType::F64, Device::cpu()), Tensor(), c.causal, 0, Tensor(), scale);
      Tensor q = on(in.q, qs, dt, Device::cuda()), k = on(in.k, ks, dt, Device::cuda()), v = on(in.v, ks, dt, Device::cuda());
      Tensor g = on(in.g, qs, dt, Device::cuda());
      Tensor out_c = Tensor::empty(qs, dt, Device::cuda()), lse_c = Tensor::empty(ls, DType::F32, Device::cuda());
      Tensor out_l = Tensor::empty(qs, dt, Device::cuda()), lse_l = Tensor::empty(ls, DType::F32, Device::cuda());
      ASSERT_NO_THROW(gpu.attention_fwd_cudnn(out_c, lse_c, q, k, v, c.causal, scale, true));
      gpu.attention_fwd(out_l, lse_l, q, k, v, Tensor(), c.causal, 0, Tensor(), scale);
      EXPECT_LE(rel(lse_c.to_double_vector(), lse_ref.to_double_vector()), 1e-4) << "cuDNN's lse";
      EXPECT_LE(rel(lse_l.to_double_vector(), lse_ref.to_double_vector()), 1e-4) << "leantrain's lse";
      EXPECT_LE(rel(out_c.to_double_vector(), out_ref.to_double_vector()), tolerance(dt)) << "cuDNN's output";
      // Reference gradients.
      KernelScope lean(AttentionKernel::Leantrain);
      const Outcome ref = run_sdpa(c, in, DType::F64, Device::cpu());
      auto grads_with = [&](bool cudnn_bwd, const Tensor& out, const Tensor& lse) {
        Tensor dq = Tensor::empty(qs, dt, Device::cuda()), dk = Tensor::empty(ks, dt, Device::cuda());
        Tensor dv = Tensor::empty(ks, dt, Device::cuda());
        if (cudnn_bwd) {
          Tensor ws = Tensor::empty({attention_ws::bytes(c.B, c.H, c.Hkv, c.Tq, c.Tk, c.D)}, DType::U8, Device::cuda());
          gpu.attention_bwd_cudnn(dq, dk, dv, g, q, k, v, out, lse, ws, c.causal, scale, true);
        } else {
          gpu.attention_bwd(dq, dk, dv, g, q, k, v, out, lse, Tensor(), c.causal, 0, Tensor(), scale);
        }
        return Outcome{out.to_double_vector(), dq.to_double_vector(), dk.to_double_vector(), dv.to_double_vector()};
      };
      expect_close(grads_with(true, out_c, lse_c), ref, tolerance(dt), "the CPU (cuDNN forward and backward)");
      expect_close(grads_with(false, out_c, lse_c), ref, tolerance(dt), "the CPU (cuDNN forward, leantrain backward)");
      expect_close(grads_with(true, out_l, lse_l), ref, tolerance(dt), "the CPU (leantrain forward, cuDNN backward)");
    }
}

// Where the loaded cuDNN cannot run a backward (before 9.16: Tk not a multiple of 128), cudnn
// says so in one line and auto runs leantrain's backward on cuDNN's forward; from 9.16 on both
// run cuDNN. Either way auto's gradients are the reference's.
TEST(CudnnAttention, StrictFailsInOneLineWhereAutoFallsBack) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  ASSERT_NO_FATAL_FAILURE(test::hold_cublaslt_workspace());
  const Case c{2, 4, 4, 77, 77, 64, true};
  const DType dt = DType::BF16;
  const Inputs in = draw(c, 950, dt);
  Outcome ref, got;
  {
    KernelScope k(AttentionKernel::Leantrain);
    ref = run_sdpa(c, in, DType::F64, Device::cpu());
  }
  {
    KernelScope k(AttentionKernel::Auto);
    ASSERT_NO_THROW(got = run_sdpa(c, in, dt, Device::cuda()));
  }
  expect_close(got, ref, tolerance(dt), "the CPU (auto)");
  KernelScope k(AttentionKernel::Cudnn);
  if (cudnn_runs_backward(c)) {
    EXPECT_NO_THROW(run_sdpa(c, in, dt, Device::cuda()));
    return;
  }
  try {
    run_sdpa(c, in, dt, Device::cuda());
    ADD_FAILURE() << "cudnn ran a backward this cuDNN cannot";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("multiple of 128"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

// TinyLlama's attention (B 4 x T 1024, 32 query heads on 4 kv heads of 64) through the packed op
// under cudnn (strict): its backward's engine asks for 32 MiB + 256 bytes of scratch, above the
// cuBLASLt workspace it could borrow, so the workspace carries it (attention_cudnn_workspace_bytes).
// The gradients are leantrain's kernels' within bf16's bound; both timed (printed, not asserted).
TEST(CudnnAttention, GroupedHeadsAtTinyLlamasShapeRunStrict) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  ASSERT_NO_FATAL_FAILURE(test::hold_cublaslt_workspace());
  const int64_t B = 4, T = 1024, H = 32, Hkv = 4, D = 64, W = (H + 2 * Hkv) * D;
  Generator gen(12);
  Tensor qkv = randn({B, T, W}, gen, 1.0f, DType::BF16, Device::cuda()).set_requires_grad(true);
  Tensor g = randn({B, T, H * D}, gen, 1.0f, DType::BF16, Device::cuda());
  AttentionMask m;
  m.causal = true;
  auto grads = [&](AttentionKernel kind) {
    KernelScope k(kind);
    qkv.impl()->grad.reset();
    Tensor y = self_attention_packed(qkv, H, Hkv, m);
    y.backward(g);
    return std::make_pair(y.to_double_vector(), qkv.grad().to_double_vector());
  };
  const auto lean = grads(AttentionKernel::Leantrain);
  std::pair<Vals, Vals> cud;
  ASSERT_NO_THROW(cud = grads(AttentionKernel::Cudnn));
  EXPECT_LE(rel(cud.first, lean.first), 1e-2) << "output";
  EXPECT_LE(rel(cud.second, lean.second), 1e-2) << "dqkv";
  auto time_ms = [&](AttentionKernel kind) {
    KernelScope k(kind);
    for (int i = 0; i < 2; ++i) self_attention_packed(qkv, H, Hkv, m).backward(g);
    backend_for(Device::cuda()).synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 10; ++i) self_attention_packed(qkv, H, Hkv, m).backward(g);
    backend_for(Device::cuda()).synchronize();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / 10;
  };
  const double tl = time_ms(AttentionKernel::Leantrain), tc = time_ms(AttentionKernel::Cudnn);
  std::printf("[ timing   ] attention fwd+bwd B4 T1024 H32 Hkv4 D64 bf16 causal: leantrain %.3f ms, cudnn %.3f ms\n",
              tl, tc);
}

// A GPT-2 124M attention (B 4 x T 1024, 12 heads of 64) through the packed op, timed against
// leantrain's kernels after a warm-up (the cuDNN plans are built then): printed, not asserted.
TEST(CudnnAttention, Gpt2ShapeTiming) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  ASSERT_NO_FATAL_FAILURE(test::hold_cublaslt_workspace());
  const int64_t B = 4, T = 1024, H = 12, D = 64, W = 3 * H * D;
  Generator gen(11);
  Tensor qkv = randn({B, T, W}, gen, 1.0f, DType::BF16, Device::cuda()).set_requires_grad(true);
  Tensor g = randn({B, T, H * D}, gen, 1.0f, DType::BF16, Device::cuda());
  auto time_ms = [&](AttentionKernel kind) {
    KernelScope k(kind);
    AttentionMask m;
    m.causal = true;
    for (int i = 0; i < 3; ++i) self_attention_packed(qkv, H, H, m).backward(g);
    backend_for(Device::cuda()).synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    const int n = 20;
    for (int i = 0; i < n; ++i) self_attention_packed(qkv, H, H, m).backward(g);
    backend_for(Device::cuda()).synchronize();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / n;
  };
  const double lean = time_ms(AttentionKernel::Leantrain), cud = time_ms(AttentionKernel::Cudnn);
  std::printf("[ timing   ] attention fwd+bwd B4 T1024 H12 D64 bf16 causal: leantrain %.3f ms, cudnn %.3f ms\n", lean,
              cud);
}
