// The range and unit of every numeric flag of train, plan, profile and generate. The command line
// refuses a value outside it as it parses (src/cli/number_flags.cpp), including a number that
// does not fit 64 bits; validate() refuses one in a RunConfig that came from elsewhere (a
// checkpoint's saved config, the library API). The bounds lie far beyond any real run; they keep
// the counts derived from them (steps x batch, dim x dim x depth weights) inside 64 bits.
#pragma once
#include <cstdint>
#include <string>

namespace lt {

struct IntRange {
  const char* flag;
  int64_t lo, hi;
  const char* unit;  // what the number counts: "optimizer steps", "samples per step"
};

struct RealRange {
  const char* flag;
  double lo, hi;
  const char* unit;
};

namespace flag_range {

inline constexpr int64_t kSteps = 1'000'000'000'000;  // 10^12 of anything counted in steps
inline constexpr int64_t kWidth = int64_t(1) << 20;   // channels, heads, tokens of context
inline constexpr int64_t kBatch = int64_t(1) << 20;   // samples

inline constexpr IntRange seq_len{"--seq-len", 0, kWidth, "tokens"};
inline constexpr IntRange dim{"--dim", 0, kWidth, "channels"};
// Deeper graphs overflow the stack (the autograd nodes are freed recursively, crashing past ~20000
// blocks with an 8 MiB stack); the deepest real transformers have a few hundred blocks.
inline constexpr IntRange depth{"--depth", 0, 4096, "blocks"};
inline constexpr IntRange heads{"--heads", 0, kWidth, "attention heads"};
inline constexpr IntRange patch{"--patch", 0, 65536, "pixels"};
inline constexpr IntRange mlp_dim{"--mlp-dim", 0, 4 * kWidth, "channels"};
inline constexpr IntRange batch{"--batch", 1, kBatch, "samples per optimizer step"};
inline constexpr IntRange micro_batch{"--micro-batch", 0, kBatch, "samples per forward/backward"};
inline constexpr IntRange loss_chunk{"--loss-chunk", 0, kBatch * kWidth, "rows of logits per chunk"};
inline constexpr IntRange steps{"--steps", 0, kSteps, "optimizer steps"};
inline constexpr IntRange warmup{"--warmup", -1, kSteps, "steps"};
inline constexpr IntRange eval_every{"--eval-every", 0, kSteps, "steps"};
inline constexpr IntRange eval_batches{"--eval-batches", 0, kSteps, "batches"};
inline constexpr IntRange log_every{"--log-every", 0, kSteps, "steps"};
inline constexpr IntRange stop_at{"--stop-at", 0, kSteps, "steps"};
inline constexpr IntRange debug_nan_at_step{"--debug-nan-at-step", 0, kSteps, "steps"};
inline constexpr IntRange workers{"--workers", 1, 1024, "threads"};
inline constexpr IntRange lora_rank{"--lora-rank", 0, kWidth, "adapter rank (0: no adapters)"};
inline constexpr RealRange beta{"--beta", 1e-6, 1000, "as DPO's beta"};
inline constexpr RealRange label_smoothing{"--label-smoothing", 0, 0.5, "as the share of pairs taken as mislabelled"};
inline constexpr RealRange simpo_gamma{"--simpo-gamma", 0, 1000, "as SimPO's target reward margin"};
inline constexpr RealRange epochs{"--epochs", 0, 1e6, "passes over the training data"};
inline constexpr IntRange bucket_mb{"--bucket-mb", 1, 4096, "MiB of gradients per bucket"};
inline constexpr IntRange buckets_in_flight{"--buckets-in-flight", 1, 64, "buckets"};
inline constexpr RealRange dist_timeout{"--dist-timeout", 0.001, 1e7, "seconds"};
// profile
inline constexpr IntRange warmup_steps{"--warmup-steps", 0, 1'000'000, "untimed steps per run"};
inline constexpr IntRange timed_steps{"--timed-steps", 1, 1'000'000, "timed steps per run"};
// generate
inline constexpr IntRange max_new_tokens{"--max-new-tokens", 0, 1'000'000'000, "tokens"};
inline constexpr IntRange top_k{"--top-k", 0, 1'000'000'000, "tokens"};

}  // namespace flag_range

// "--steps takes 0 to 1000000000000 optimizer steps (0: from --epochs)"
std::string range_str(const IntRange& r);
std::string range_str(const RealRange& r);
// Throw UsageError("<flag> <v> is out of range", range_str(r), "pass a value in that range") when
// v lies outside r (or, for a real, is not finite).
void check_range(const IntRange& r, int64_t v);
void check_range(const RealRange& r, double v);

}  // namespace lt
