// --attention-kernel on the host side: the recipe row; the route each attention call takes (from
// the setting, dtype, shapes and masks only, the same on cuda and on a meta that simulates it, so
// a plan replays it); the one allocation the cuDNN route adds (the backward's workspace, closed
// form, category workspace, freed before the op returns: the saved tensors are leantrain's);
// one-line errors where cudnn cannot run; the CPU, which runs the reference whatever auto says.
// The GPU side (cuDNN against the CPU reference and leantrain's kernels): test_cudnn_attention.cpp.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "backend/attention_workspace.h"
#include "leantrain/autograd.h"
#include "leantrain/ops.h"
#include "leantrain/plan.h"
#include "leantrain/usage_error.h"
#include "memory/host_allocators.h"
#include "train/recipe_table.h"

using namespace lt;

namespace {

// The process's attention kernel for a scope.
class KernelScope {
 public:
  explicit KernelScope(AttentionKernel k) : prev_(attention_kernel()) { set_attention_kernel(k); }
  ~KernelScope() { set_attention_kernel(prev_); }

 private:
  AttentionKernel prev_;
};

struct Dims {
  int64_t B, T, H, Hkv, D;
};

// Records dev's allocation history for a scope, and stops and clears it on the way out (also
// when the op throws); events() gives the record so far, without Other (host staging).
class History {
 public:
  explicit History(Device dev) : a_(allocator_for(dev)) {
    a_.clear_history();
    a_.set_history(true);
  }
  ~History() {
    a_.set_history(false);
    a_.clear_history();
  }
  std::vector<MemoryEvent> events() const {
    std::vector<MemoryEvent> t;
    for (const MemoryEvent& e : a_.history())
      if (e.category != Category::Other) t.push_back(e);
    return t;
  }

 private:
  Allocator& a_;
};

// Allocation events of one packed self-attention forward + backward.
std::vector<MemoryEvent> packed_trace(Device dev, DType dt, const Dims& d, const AttentionMask& mask) {
  Generator gen(1);
  const int64_t W = (d.H + 2 * d.Hkv) * d.D;
  Tensor qkv = randn({d.B, d.T, W}, gen, 1.0f, dt, dev).set_requires_grad(true);
  Tensor g = randn({d.B, d.T, d.H * d.D}, gen, 1.0f, dt, dev);
  History h(dev);
  {
    MemoryCategoryScope act(Category::Activation);
    self_attention_packed(qkv, d.H, d.Hkv, mask).backward(g);
  }
  return h.events();
}

// The same for scaled_dot_product_attention on separate q [B, H, Tq, D], k and v [B, Hkv, Tk, D].
std::vector<MemoryEvent> sdpa_trace(Device dev, DType dt, const Dims& d, int64_t Tk, bool causal) {
  Generator gen(2);
  Tensor q = randn({d.B, d.H, d.T, d.D}, gen, 1.0f, dt, dev).set_requires_grad(true);
  Tensor k = randn({d.B, d.Hkv, Tk, d.D}, gen, 1.0f, dt, dev).set_requires_grad(true);
  Tensor v = randn({d.B, d.Hkv, Tk, d.D}, gen, 1.0f, dt, dev).set_requires_grad(true);
  Tensor g = randn({d.B, d.H, d.T, d.D}, gen, 1.0f, dt, dev);
  History h(dev);
  {
    MemoryCategoryScope act(Category::Activation);
    scaled_dot_product_attention(q, k, v, causal).backward(g);
  }
  return h.events();
}

AttentionMask causal_mask() {
  AttentionMask m;
  m.causal = true;
  return m;
}

// `with` is `without` plus one workspace allocation of `bytes` and its free, nothing else (blocks
// only: the caching allocator may map a segment more for the workspace, which is reserved memory).
::testing::AssertionResult adds_only_the_workspace(const std::vector<MemoryEvent>& with,
                                                  const std::vector<MemoryEvent>& without, int64_t bytes) {
  std::vector<MemoryEvent> rest;
  int allocs = 0, frees = 0;
  uint64_t addr = 0;
  auto is_block = [](const MemoryEvent& e) {
    return e.action == MemoryEvent::Action::Alloc || e.action == MemoryEvent::Action::Free;
  };
  std::vector<MemoryEvent> base;
  for (const MemoryEvent& e : without)
    if (is_block(e)) base.push_back(e);
  for (const MemoryEvent& e : with) {
    if (!is_block(e)) continue;
    if (e.category == Category::Workspace && e.action == MemoryEvent::Action::Alloc && e.requested == bytes) {
      ++allocs;
      addr = e.addr;
      continue;
    }
    if (allocs == 1 && e.category == Category::Workspace && e.action == MemoryEvent::Action::Free && e.addr == addr) {
      ++frees;
      continue;
    }
    rest.push_back(e);
  }
  if (allocs != 1 || frees != 1)
    return ::testing::AssertionFailure() << allocs << " workspace allocations of " << bytes << " bytes, " << frees
                                         << " frees";
  if (rest.size() != base.size()) return ::testing::AssertionFailure() << rest.size() << " other blocks vs " << base.size();
  for (size_t i = 0; i < rest.size(); ++i)
    if (rest[i].action != base[i].action || rest[i].size != base[i].size || rest[i].requested != base[i].requested ||
        rest[i].category != base[i].category)
      return ::testing::AssertionFailure() << "event " << i << ": " << action_name(rest[i].action) << " "
                                           << rest[i].requested << " vs " << action_name(base[i].action) << " "
                                           << base[i].requested;
  return ::testing::AssertionSuccess();
}

bool has_workspace(const std::vector<MemoryEvent>& t) {
  for (const MemoryEvent& e : t)
    if (e.category == Category::Workspace) return true;
  return false;
}

// The message of the UsageError `f` throws, or "" when it throws none.
template <class F>
std::string usage_error_of(F f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(AttentionKernel, IsAChoiceOfTheRecipe) {
  const RecipeField* f = recipe_field("--attention-kernel");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f, recipe_field("attention_kernel"));
  EXPECT_EQ(f->kind, FieldKind::Choice);
  EXPECT_FALSE(f->saved);  // a property of the machine, as --gemm-workspace: a resume may pick another
  RunConfig c;
  EXPECT_EQ(c.attention_kernel, AttentionKernel::Leantrain);
  EXPECT_TRUE(field_is_default(*f, c));
  set_choice(*f, c, "cudnn");
  EXPECT_EQ(c.attention_kernel, AttentionKernel::Cudnn);
  EXPECT_EQ(field_text(*f, c), "cudnn");
  EXPECT_FALSE(field_is_default(*f, c));
  set_choice(*f, c, "auto");
  EXPECT_EQ(c.attention_kernel, AttentionKernel::Auto);
  const std::string e = usage_error_of([&] { set_choice(*f, c, "flash"); });
  EXPECT_NE(e.find("--attention-kernel flash"), std::string::npos) << e;
  EXPECT_NE(e.find("auto, leantrain or cudnn"), std::string::npos) << e;
}

TEST(AttentionKernel, WorkspaceIsDqInF32AndOneF32PerQueryRow) {
  EXPECT_EQ(attention_cudnn_workspace_bytes(16, 12, 1024, 64),
            int64_t(4) * 16 * 12 * 1024 * 64 + 4 * 16 * 12 * 1024);
  EXPECT_EQ(attention_cudnn_workspace_bytes(1, 1, 1, 8), 36);
}

// Grouped-query heads add the engine's scratch after the accumulator and row sums, from a 256-byte
// boundary: dK and dV over every query head in 16 bits and 4 KiB (TinyLlama's backward asked
// 4·B·H·Tk·D + 256 bytes of it on an H100).
TEST(AttentionKernel, GroupedHeadsAddTheEnginesScratchFromAnAlignedOffset) {
  const int64_t acc = int64_t(4) * 4 * 32 * 1024 * 65;
  EXPECT_EQ(attention_ws::scratch_offset(4, 32, 1024, 64), acc);  // already a multiple of 256
  EXPECT_EQ(attention_ws::bytes(4, 32, 4, 1024, 1024, 64), acc + int64_t(4) * 4 * 32 * 1024 * 64 + 4096);
  EXPECT_EQ(attention_ws::scratch_offset(1, 1, 1, 8), 256);
  EXPECT_EQ(attention_ws::bytes(1, 2, 1, 1, 3, 8), 256 + 4 * 2 * 3 * 8 + 4096);
  EXPECT_GE(attention_ws::bytes(4, 32, 4, 1024, 1024, 64) - attention_ws::scratch_offset(4, 32, 1024, 64),
            33554688);  // what cuDNN 9.14 asked for that shape
}

// On a meta that stands for a GPU, a call cuDNN can take allocates what leantrain's kernels
// allocate, plus the backward's workspace: the forward's saved out and lse are the same bytes.
TEST(AttentionKernel, CudnnRouteAddsOnlyTheBackwardsWorkspace) {
  MetaAllocatorScope gpu(true);
  const Device meta = Device::meta();
  for (const Dims& d : {Dims{2, 77, 4, 4, 64}, Dims{3, 64, 8, 2, 128}, Dims{1, 130, 6, 1, 32}}) {
    SCOPED_TRACE("B " + std::to_string(d.B) + " T " + std::to_string(d.T) + " H " + std::to_string(d.H) + " Hkv " +
                 std::to_string(d.Hkv) + " D " + std::to_string(d.D));
    const int64_t ws = attention_ws::bytes(d.B, d.H, d.Hkv, d.T, d.T, d.D);
    for (DType dt : {DType::BF16, DType::F16}) {
      std::vector<MemoryEvent> lean, cud, autos, sd_lean, sd_cud;
      {
        KernelScope k(AttentionKernel::Leantrain);
        lean = packed_trace(meta, dt, d, causal_mask());
        sd_lean = sdpa_trace(meta, dt, d, d.T, true);
      }
      {
        KernelScope k(AttentionKernel::Cudnn);
        cud = packed_trace(meta, dt, d, causal_mask());
        sd_cud = sdpa_trace(meta, dt, d, d.T, true);
      }
      {
        KernelScope k(AttentionKernel::Auto);
        autos = packed_trace(meta, dt, d, AttentionMask());
      }
      EXPECT_FALSE(has_workspace(lean));
      EXPECT_TRUE(adds_only_the_workspace(cud, lean, ws)) << "packed";
      EXPECT_TRUE(adds_only_the_workspace(sd_cud, sd_lean, ws)) << "sdpa";
      EXPECT_TRUE(adds_only_the_workspace(autos, lean, ws)) << "auto, not causal";
    }
  }
}

// Under auto a call cuDNN cannot take runs leantrain's kernels (no workspace); under cudnn it is
// a one-line UsageError naming why and the way out.
TEST(AttentionKernel, CudnnRefusesWhatItCannotRunAndAutoFallsBack) {
  MetaAllocatorScope gpu(true);
  const Device meta = Device::meta();
  const Dims d{2, 40, 4, 4, 64};
  Tensor pad = Tensor::empty({d.B, d.T}, DType::U8, meta);
  AttentionMask padded = causal_mask(), windowed = causal_mask(), docs = causal_mask();
  padded.key_padding = pad;
  windowed.window = 8;
  docs.doc_pos = Tensor::empty({d.B, d.T}, DType::I32, meta);
  struct Refused {
    const char* what;
    std::function<std::vector<MemoryEvent>()> run;
    const char* why;
  };
  const std::vector<Refused> cases = {
      {"f32", [&] { return packed_trace(meta, DType::F32, d, causal_mask()); }, "bf16 or f16"},
      {"padding mask", [&] { return packed_trace(meta, DType::BF16, d, padded); }, "key padding mask"},
      {"window", [&] { return packed_trace(meta, DType::BF16, d, windowed); }, "sliding window"},
      {"packed documents", [&] { return packed_trace(meta, DType::BF16, d, docs); }, "doc_pos"},
      {"head dim 20", [&] { return packed_trace(meta, DType::BF16, Dims{2, 40, 2, 2, 20}, causal_mask()); }, "head dim 20"},
      {"head dim 264", [&] { return packed_trace(meta, DType::BF16, Dims{2, 40, 2, 2, 264}, causal_mask()); }, "head dim 264"},
      {"causal Tq != Tk", [&] { return sdpa_trace(meta, DType::BF16, d, 56, true); }, "Tq == Tk"},
  };
  for (const Refused& r : cases) {
    SCOPED_TRACE(r.what);
    {
      KernelScope k(AttentionKernel::Auto);
      std::vector<MemoryEvent> t;
      ASSERT_NO_THROW(t = r.run());
      EXPECT_FALSE(has_workspace(t));
    }
    KernelScope k(AttentionKernel::Cudnn);
    const std::string e = usage_error_of(r.run);
    EXPECT_NE(e.find("--attention-kernel cudnn cannot run this attention"), std::string::npos) << e;
    EXPECT_NE(e.find(r.why), std::string::npos) << e;
    EXPECT_NE(e.find("--attention-kernel auto"), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  // Non-causal cross-attention (Tq != Tk) is cuDNN's to run.
  KernelScope k(AttentionKernel::Cudnn);
  EXPECT_TRUE(has_workspace(sdpa_trace(meta, DType::BF16, d, 56, false)));
}

// The CPU has no cuDNN: auto runs the reference (the same bits, the same allocations as
// leantrain), cudnn says it needs a CUDA device. A meta that stands for the CPU does the same.
TEST(AttentionKernel, CpuRunsTheReference) {
  const Dims d{2, 33, 4, 2, 16};
  Generator gen(5);
  const int64_t W = (d.H + 2 * d.Hkv) * d.D;
  const Tensor qkv0 = randn({d.B, d.T, W}, gen, 1.0f, DType::F32);
  auto run = [&] {
    Tensor qkv = qkv0.detach().set_requires_grad(true);
    Tensor y = self_attention_packed(qkv, d.H, d.Hkv, causal_mask());
    y.backward(ones(y.shape()));
    return std::vector<std::vector<double>>{y.to_double_vector(), qkv.grad().to_double_vector()};
  };
  std::vector<std::vector<double>> lean, autos;
  {
    KernelScope k(AttentionKernel::Leantrain);
    lean = run();
    EXPECT_FALSE(has_workspace(packed_trace(Device::cpu(), DType::BF16, d, causal_mask())));
  }
  {
    KernelScope k(AttentionKernel::Auto);
    autos = run();
    EXPECT_FALSE(has_workspace(packed_trace(Device::cpu(), DType::BF16, d, causal_mask())));
    MetaAllocatorScope cpu_plan(false);
    EXPECT_FALSE(has_workspace(packed_trace(Device::meta(), DType::BF16, d, causal_mask())));
  }
  EXPECT_EQ(lean, autos);
  KernelScope k(AttentionKernel::Cudnn);
  const std::string e = usage_error_of([&] { packed_trace(Device::cpu(), DType::BF16, d, causal_mask()); });
  EXPECT_NE(e.find("runs on CUDA devices only"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

// A GPU plan of a bf16-mixed GPT-2 under --attention-kernel cudnn: every attention backward adds
// the workspace and nothing else, so the peak rises by at most one workspace block (512-byte
// rounded) and never falls; the setting is the run config's (plan_run sets it).
TEST(AttentionKernel, PlanCountsTheWorkspace) {
  KernelScope restore(AttentionKernel::Leantrain);  // plan_run sets the process's kernel from the config
  RunConfig c;
  c.model = "gpt2-tiny";  // 4 heads of 32
  c.data = "synthetic";
  c.seq_len = 160;        // > the width 128: attention and the projection run apart
  c.batch = 4;
  c.steps = 2;
  c.eval_batches = 1;
  c.precision = Precision::MixedBf16;
  c.device = "cpu";
  const PlanResult lean = plan_run(c);
  c.attention_kernel = AttentionKernel::Cudnn;
  const PlanResult cud = plan_run(c);
  c.attention_kernel = AttentionKernel::Auto;
  const PlanResult autos = plan_run(c);
  const int64_t ws = (attention_cudnn_workspace_bytes(4, 4, 160, 32) + 511) / 512 * 512;
  EXPECT_GE(cud.peak_allocated, lean.peak_allocated);
  EXPECT_LE(cud.peak_allocated, lean.peak_allocated + ws);
  EXPECT_EQ(autos.peak_allocated, cud.peak_allocated);
  EXPECT_EQ(autos.peak_reserved, cud.peak_reserved);
  // A width above the sequence: the attention_linear path (attention recomputed in its backward).
  c.seq_len = 64;
  c.attention_kernel = AttentionKernel::Leantrain;
  const PlanResult lean_short = plan_run(c);
  c.attention_kernel = AttentionKernel::Cudnn;
  const PlanResult cud_short = plan_run(c);
  const int64_t ws_short = (attention_cudnn_workspace_bytes(4, 4, 64, 32) + 511) / 512 * 512;
  EXPECT_GE(cud_short.peak_allocated, lean_short.peak_allocated);
  EXPECT_LE(cud_short.peak_allocated, lean_short.peak_allocated + ws_short);
  // A CPU plan with cudnn is refused (there is no cuDNN on the CPU).
  EXPECT_THROW(plan_run(c, PlanOptions{"cpu"}), Error);
}
