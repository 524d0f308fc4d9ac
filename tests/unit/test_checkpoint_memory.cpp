// What checkpointing saves, in closed form, and that the meta device sees the same allocations.
//
// A GPT-2 block (width C, H heads) over N = B*T tokens in f32 (s = 4 bytes) keeps for backward:
//   ln_1 out (C), qkv (3C, read in place by the packed attention op), attention out (C, heads
//   merged by the kernel, also c_proj's input), residual h (C), ln_2 out (C), MLP up (4C),
//   GELU out (4C), block output (C)                                  = 16 C s N bytes
//   + LayerNorm mean and rstd (4 N f32) + attention log-sum-exp (H N f32)
// (The copy-based attention before it kept q, k, v copies, a head-major output and its merged
// copy instead of qkv and out: 17 C s N.)
// Checkpointed, it keeps only its output (its input is the previous block's output), so
//   blocks:    saved per checkpointed block = 15 C s N + (4 + H) 4 N
// Selective checkpoints every block but keeps the results of its matmul-class ops: qkv (3C),
// attention out (C) and lse, c_proj out (C), MLP up (4C), MLP down (C); with the block output
// (C) that is 11 C s N + H 4 N. The norms' outputs and statistics, the residual h and the GELU
// output go (recomputed from the kept tensors), so
//   selective: saved per block = 5 C s N + 4 * 4 N
// In general (MLP width M): (C + M) s N + 16 N of the block's (8C + 2M) s N + (4 + H) 4 N.
// GELU alone would save nothing: its input is what the region keeps, its output the next
// Linear keeps (checked below through a regex).
// With N a multiple of 128 every tensor is a whole number of 512-byte allocator blocks, and with
// the vocabulary large the peak is in the loss head in every mode, where all saved activations
// are alive: the peak falls by exactly the saved bytes.
#include <gtest/gtest.h>

#include "checkpoint_helpers.h"

using namespace lt;
using namespace ckpt_test;

namespace {

constexpr int64_t kB = 2, kT = 64, kC = 32, kH = 4, kL = 4, kV = 1024;

models::GPT2Config config() {
  models::GPT2Config c;
  c.vocab_size = kV;
  c.n_positions = kT;
  c.n_embd = kC;
  c.n_layer = kL;
  c.n_head = kH;
  c.resid_pdrop = c.embd_pdrop = 0.1;
  return c;
}

struct Peaks {
  int64_t activation = 0, allocated = 0;
};

// One forward + backward from a clean allocator; peaks relative to what was there before.
Peaks step_peaks(const std::string& spec, Device d = Device::cpu()) {
  Allocator& a = allocator_for(d);
  models::GPT2 m(config(), {.device = d, .seed = 1});
  nn::apply_checkpointing(m, spec);
  Tensor x = ids(kB, kT, kV, 1, d), y = ids(kB, kT, kV, 2, d);
  const MemoryStats before = a.stats();
  a.reset_peak_stats();
  {
    MemoryCategoryScope act(Category::Activation);
    m.loss(x, y).backward();
  }
  const MemoryStats s = a.stats();
  const int act_i = int(Category::Activation);
  return {s.category[size_t(act_i)].peak - before.category[size_t(act_i)].current,
          s.allocated_bytes.peak - before.allocated_bytes.current};
}

constexpr int64_t kN = kB * kT, kS = 4;
constexpr int64_t kStats = (4 + kH) * 4 * kN;
// A block saves x, qkv (3C), the attention output, h and the MLP's pre-activation (4C): 10 C
// per token (the norms' outputs and the GELU's are recomputed in the backward, see
// docs/memory-model.md); a checkpointed block keeps only x, so it frees 9 C and the statistics.
constexpr int64_t kBlockSaved = 9 * kC * kS * kN + kStats;
// selective wraps attn and mlp, which turns the folds off (the norms' outputs come back as the
// wrappers' inputs) and keeps the projections' outputs: one C per token more than no
// checkpointing, less the recomputed statistics. The default already recomputes what it did.
constexpr int64_t kSelectiveSaved = -1 * kC * kS * kN + 4 * 4 * kN;

TEST(CheckpointMemory, PeakFallsByTheClosedForm) {
  static_assert(kN % 128 == 0, "keeps every tensor a whole number of 512-byte blocks");
  const Peaks none = step_peaks("none");
  struct Case {
    const char* spec;
    int64_t saved;
  };
  for (Case c : {Case{"blocks", kL * kBlockSaved}, Case{"every:2", 2 * kBlockSaved}, Case{"every:3", 2 * kBlockSaved},
                 Case{"transformer\\.h\\.2", kBlockSaved}, Case{"selective", kL * kSelectiveSaved},
                 Case{".*\\.mlp\\.act", 0}}) {
    const Peaks p = step_peaks(c.spec);
    EXPECT_EQ(none.activation - p.activation, c.saved) << c.spec;
    EXPECT_EQ(none.allocated - p.allocated, c.saved) << c.spec;
  }
}

// The dry run predicts a checkpointed run: the same allocations, in the same order, as the CPU.
TEST(CheckpointMemory, MetaTraceEqualsCpu) {
  for (const char* spec : {"blocks", "selective", "every:3"}) {
    std::vector<std::vector<MemoryEvent>> traces;
    std::vector<Peaks> peaks;
    for (Device d : {Device::cpu(), Device::meta()}) {
      Allocator& a = allocator_for(d);
      a.clear_history();
      a.set_history(true);
      peaks.push_back(step_peaks(spec, d));
      a.set_history(false);
      // Host staging of small index tensors (GPT-2's position ids) is category `other` and goes
      // through the CPU allocator whatever the device: not part of the device's trace.
      std::vector<MemoryEvent> t;
      for (const MemoryEvent& e : a.history())
        if (e.category != Category::Other) t.push_back(e);
      traces.push_back(t);
      a.clear_history();
    }
    const auto &cpu = traces[0], &meta = traces[1];
    ASSERT_GT(cpu.size(), 200u);
    for (size_t i = 0; i < std::min(cpu.size(), meta.size()); ++i)
      ASSERT_TRUE(cpu[i].action == meta[i].action && cpu[i].size == meta[i].size && cpu[i].category == meta[i].category)
          << spec << " event " << i << ": cpu " << action_name(cpu[i].action) << " " << cpu[i].size << " op "
          << cpu[i].op << "; meta " << action_name(meta[i].action) << " " << meta[i].size << " op " << meta[i].op;
    ASSERT_EQ(cpu.size(), meta.size()) << spec;
    EXPECT_EQ(peaks[0].activation, peaks[1].activation) << spec;
    EXPECT_EQ(peaks[0].allocated, peaks[1].allocated) << spec;
  }
}

}  // namespace
