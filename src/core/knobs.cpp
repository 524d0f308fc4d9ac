// The knob table and its one parser (core/knobs.h). Adding a knob: one row here, read it with
// knob_on/knob_int/knob_choice where it acts, and say in the row what it changes.
#include "core/knobs.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "leantrain/usage_error.h"

namespace lt {

namespace {

using T = KnobType;
using M = KnobMemory;
using U = KnobUse;

// Grouped as `leantrain knobs` prints them. Memory Yes means the plan reads the same variable
// (ops are the same on meta; dist's buffers are planned from these values).
constexpr Knob kKnobs[] = {
    // Kernels and fusions on the GPU (defaults are what bench/results measured).
    {"LEANTRAIN_GEMM_GELU", T::Switch, "1", 0, 0, "", M::Yes, U::Run, "kernels",
     "0: linear_gelu as a linear then a GELU (no GELU epilogue in the GEMM); other saved tensors"},
    {"LEANTRAIN_GEMM_BGRAD", T::Switch, "1", 0, 0, "", M::Yes, U::Run, "kernels",
     "0: a weight's and its bias's gradients as a GEMM then a separate sum"},
    {"LEANTRAIN_F32_WEIGHT_GRADS", T::Switch, "1", 0, 0, "", M::Yes, U::Run, "kernels",
     "0: under autocast, weight gradients go through 16-bit casts instead of being summed in f32"},
    {"LEANTRAIN_GEMM_BGRAD_EPILOGUE", T::Switch, "1", 0, 0, "", M::Unchecked, U::Run, "kernels",
     "0: bias gradients from column sums after a plain GEMM, not cuBLASLt's BGRAD epilogue"},
    {"LEANTRAIN_BN_RELU", T::Integer, "0", 0, 3, "", M::Yes, U::Run, "kernels",
     "a ResNet's batch norm then ReLU: 0 two ops (default); 1 one op whose backward runs the ReLU's mask kernel "
     "first; 2 one op masking inside the norm's backward kernels; 3 as 1, and a block's last norm + identity "
     "shortcut + ReLU as one op (2-7% more img/s on an H100; reserved peaks can rise)"},
    {"LEANTRAIN_REDUCE_COLS_SPLIT", T::Switch, "0", 0, 0, "", M::No, U::Run, "kernels",
     "1: tall column sums in two passes through the GEMM workspace"},
    {"LEANTRAIN_GEMM_TUNE", T::Switch, "0", 0, 0, "", M::No, U::Run, "kernels",
     "1: time up to 8 cuBLASLt candidates per product shape and keep the fastest (prints each)"},
    {"LEANTRAIN_NORM_FUSED_BWD", T::Switch, "1", 0, 0, "", M::Unchecked, U::Run, "kernels",
     "0: the norms' dx and dw/db in separate passes"},
    {"LEANTRAIN_ATTN_OWN_DELTA", T::Switch, "1", 0, 0, "", M::No, U::Run, "kernels",
     "0: attention backward keeps delta in dq's rows, not in the GEMM workspace"},
    {"LEANTRAIN_ATTN_FWD_MT", T::Integer, "1", 1, 2, "", M::No, U::Run, "kernels",
     "2: attention forward in 128-row blocks for head dim 64"},
    {"LEANTRAIN_ATTN_DKDV_SPLITS", T::Integer, "0", 0, 4, "", M::No, U::Run, "kernels",
     "1, 2 or 4: force the dK/dV kernel's split of a key tile's query heads (0: chosen by size)"},
    {"LEANTRAIN_ATTN_F32_SIMT", T::Switch, "0", 0, 0, "", M::No, U::Run, "kernels",
     "1: f32 attention on the SIMT kernels instead of the register-tiled ones"},
    {"LEANTRAIN_ATTN_MMA_D256", T::Switch, "1", 0, 0, "", M::No, U::Run, "kernels",
     "0: head dim 256 on the SIMT attention kernels instead of the tensor-core ones"},
    {"LEANTRAIN_GDN_STAGE_ROWS", T::Switch, "1", 0, 0, "", M::No, U::Run, "kernels",
     "0: the Gated DeltaNet's state passes read each chunk's rows in place instead of staging them in shared memory"},
    {"LEANTRAIN_GDN_TILED", T::Switch, "1", 0, 0, "", M::No, U::Run, "kernels",
     "0: the Gated DeltaNet's state passes by delta.cu's one-output-a-thread kernels instead of the register-tiled ones (delta_state.cu)"},
    {"LEANTRAIN_MOE_GEMM_STAGES", T::Integer, "3", 2, 4, "", M::No, U::Run, "kernels",
     "2, 3 or 4: K tiles the grouped expert GEMM keeps in flight (default 3; 4 with 32-deep stages only)"},
    {"LEANTRAIN_MOE_GEMM_BN", T::Integer, "128", 128, 256, "", M::No, U::Run, "kernels",
     "256 (with LEANTRAIN_MOE_GEMM_BK=32): the grouped expert GEMM's tiles 256 columns wide where the output is (slower on an H100)"},
    {"LEANTRAIN_MOE_GEMM_BK", T::Integer, "64", 32, 64, "", M::No, U::Run, "kernels",
     "32: the grouped expert GEMM's stages 32 deep in K (20 KB of shared memory each) instead of 64 (37 KB)"},
    {"LEANTRAIN_MOE_GEMM_PAIR", T::Switch, "1", 0, 0, "", M::No, U::Run, "kernels",
     "0: a LoRA adapter's term on the experts as a second launch added into the output, not as K tiles after the expert GEMM's own"},
    {"LEANTRAIN_NORM_HEADS_CUDA", T::Switch, "1", 0, 0, "", M::Yes, U::Run, "kernels",
     "0: Qwen3's, Qwen3.5's and Gemma 3's q/k norms on CUDA by rms_norm on head copies, not the per-head kernels"},
    {"LEANTRAIN_NF4_EXPERT_GROUP", T::Integer, "0", 0, 1 << 20, "", M::Yes, U::Run, "kernels",
     "experts an NF4 expert GEMM dequantises at a time (0: as many as fit 64 MiB)"},
    {"LEANTRAIN_CUDNN_CONV_GRAPH", T::Switch, "1", 0, 0, "", M::No, U::Run, "kernels",
     "0: convolutions through cuDNN's legacy API only, not the backend API's plans kept per problem"},
    {"LEANTRAIN_CUDNN_LOG", T::Switch, "0", 0, 0, "", M::No, U::Run, "kernels",
     "1: print each convolution's chosen cuDNN algorithm, each cuDNN attention plan built, and at exit the convolutions' host time, on stderr"},
    // Several GPUs or processes.
    {"LEANTRAIN_PEER_REDUCE", T::Switch, "1", 0, 0, "", M::Yes, U::Run, "distributed",
     "0: every bucket's all-reduce through NCCL, not the copy engines' peer reduction"},
    {"LEANTRAIN_PEER_CHUNK_MB", T::Integer, "16", 1, 1024, "", M::Yes, U::Run, "distributed",
     "MiB of one rank's chunk of a peer all-reduce piece"},
    {"LEANTRAIN_NCCL_MAX_CTAS", T::Integer, "0", 0, 1024, "", M::No, U::Run, "distributed",
     "cap on the thread blocks of NCCL's kernels (0: NCCL's choice)"},
    {"LEANTRAIN_NCCL_CTA_POLICY", T::Integer, "0", 0, 2, "", M::No, U::Run, "distributed",
     "NCCL's CTA policy (1: efficiency, 2: zero; 0: NCCL's default)"},
    {"LEANTRAIN_OPT_STREAM", T::Integer, "0", 0, 2, "", M::Yes, U::Run, "kernels",
     "--fused-step's updates: 0 on the compute stream, in turn with the backward; 1 on a stream of their own, "
     "beside the backward that produces the next gradients; 2 as 1, the compute stream at the highest priority"},
    {"LEANTRAIN_LOSS_CHUNK_EAGER", T::Switch, "0", 0, 0, "", M::Yes, U::Run, "kernels",
     "1: --loss-chunk's head makes its gradients in the forward (dlogits right away, kept as dHidden and dW) "
     "instead of recomputing the logits in the backward: no second head GEMM"},
    {"LEANTRAIN_KEEP_CASTS", T::Switch, "0", 0, 0, "", M::Yes, U::Run, "kernels",
     "1: --keep-casts (for leantrain_bench, which has no flag for it): under a -mixed precision each optimizer "
     "update also writes its parameter's 16-bit copy (AdamW in its update kernel), kept between steps, so the "
     "forward casts no weight (+2 bytes a cast parameter)"},
    {"LEANTRAIN_GRADIENT_PARTS", T::Switch, "1", 0, 0, "", M::Yes, U::Run, "kernels",
     "a stacked weight's gradient (q|k|v, gate|up as one GEMM) stays one buffer and each weight's .grad is "
     "its block of it; 0: a copy each (TinyLlama on an H100: 1.9 ms a step slower, reserved 15 MB higher)"},
    {"LEANTRAIN_NORM_IN_UPDATE", T::Switch, "0", 0, 0, "", M::Yes, U::Run, "kernels",
     "1: an unclipped AdamW step takes the gradient norm from the update's own read of the gradients (no pass "
     "of its own, no wait before the update) and checks it at the next step; opt-in until a GPU times it"},
    {"LEANTRAIN_RECOMPUTE_TAIL", T::Switch, "0", 0, 0, "", M::No, U::Run, "kernels",
     "1: a checkpointed block's recomputation runs its MLP's last product (LLaMA down_proj, GPT-2/ViT fc2) and "
     "last residual add dry (same allocations, no kernels): nothing reads the region's output; opt-in until a "
     "GPU times it"},
    {"LEANTRAIN_OPT_STREAM_GRID", T::Integer, "8", 0, 64, "", M::No, U::Run, "kernels",
     "blocks per SM that an optimizer kernel on the optimizer stream launches at most (0: one a chunk, no cap)"},
    {"LEANTRAIN_OPT_STREAM_LAG", T::Integer, "8", 1, 1 << 20, "", M::Yes, U::Run, "kernels",
     "with LEANTRAIN_OPT_STREAM: the compute stream waits for the update that many updates back, so that "
     "the gradients freed up to it are reused there"},
    {"LEANTRAIN_COMM_PRIORITY", T::Switch, "0", 0, 0, "", M::No, U::Run, "distributed",
     "1: the communication stream at the device's highest priority"},
    // Offload to host memory and disk.
    {"LEANTRAIN_HOST_PREFETCH", T::Integer, "512", 0, 1 << 20, "", M::No, U::Run, "offload",
     "software prefetch distance of the host optimizer steps, in elements (0: none)"},
    {"LEANTRAIN_HOST_STREAM_STORES", T::Integer, "2", 0, 2, "", M::No, U::Run, "offload",
     "streaming stores of the host AdamW: 2 the 16-bit copy only, 1 master and moments too, 0 none"},
    {"LEANTRAIN_DISK_IO", T::Choice, "uring", 0, 0, "uring|threads", M::No, U::Run, "offload",
     "threads: the --offload-dir file through pread/pwrite threads, not io_uring"},
    {"LEANTRAIN_OFFLOAD_TRACE", T::Switch, "0", 0, 0, "", M::No, U::Run, "offload",
     "1: one line per step on stderr with where the offload step's time went"},
    // Finding faults and time.
    {"LEANTRAIN_CUDA_SYNC", T::Switch, "0", 0, 0, "", M::No, U::Run, "debugging",
     "1: synchronise after every kernel, so an asynchronous fault names its kernel"},
    {"LEANTRAIN_STEP_TRACE", T::Switch, "0", 0, 0, "", M::No, U::Run, "debugging",
     "1: time each phase of a step (phases serialised) and print it"},
    // Not read by the training binary.
    {"LEANTRAIN_CUDA", T::Choice, "AUTO", 0, 0, "AUTO|ON|OFF", M::No, U::Script, "build",
     "scripts/build.sh: OFF skips the CUDA backend (a machine without a GPU), ON requires it"},
    {"LEANTRAIN_UNITY", T::Choice, "OFF", 0, 0, "OFF|ON", M::No, U::Script, "build",
     "scripts/build.sh and sanitize.sh: ON compiles the library in unity batches (CI's clean builds)"},
    {"LEANTRAIN_CUDA_ARCH", T::Choice, "90", 0, 0, "90|90-virtual", M::No, U::Script, "build",
     "scripts/build.sh: 90-virtual compiles the kernels to PTX only, a quicker check (CI, no GPU)"},
    {"LEANTRAIN_STORE_FD", T::Integer, "0", 0, 1 << 30, "", M::No, U::Internal, "internal",
     "the rendezvous socket `train --devices N` hands to rank 0 (set by leantrain itself)"},
    {"LEANTRAIN_SUPERVISE_RANK", T::Switch, "0", 0, 0, "", M::No, U::Internal, "internal",
     "1: a CPU rank of `train --devices N` runs under a supervisor that names a signal killing it"},
    {"LEANTRAIN_STDOUT_IS_TERMINAL", T::Switch, "0", 0, 0, "", M::No, U::Internal, "internal",
     "whether the launcher's stdout is a terminal, for ranks under mpirun's pty (unset: isatty)"},
};

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return out;
}

[[noreturn]] void bad_value(const Knob& k, std::string_view v, const std::string& why, const std::string& fix) {
  throw UsageError(std::string(k.name) + "='" + std::string(v) + "'", why,
                   fix + ", or unset it; `leantrain knobs` lists every knob");
}

const Knob& knob(const char* name) {
  const Knob* k = find_knob(name);
  LT_ASSERT(k != nullptr);  // every knob a reader names is in the table
  return *k;
}

std::string value_now(const Knob& k) {
  const char* v = std::getenv(k.name);
  return parse_knob(k, v && *v ? v : k.fallback);
}

const char* type_name(KnobType t) {
  switch (t) {
    case T::Switch: return "0|1";
    case T::Integer: return "integer";
    case T::Choice: return "choice";
  }
  return "?";
}

}  // namespace

std::span<const Knob> knob_table() { return kKnobs; }

const Knob* find_knob(std::string_view name) {
  for (const Knob& k : kKnobs)
    if (name == k.name) return &k;
  return nullptr;
}

std::string parse_knob(const Knob& k, std::string_view v) {
  switch (k.type) {
    case T::Switch: {
      const std::string s = lower(v);
      if (s == "0" || s == "off" || s == "false" || s == "no") return "0";
      if (s == "1" || s == "on" || s == "true" || s == "yes") return "1";
      bad_value(k, v, "not an on/off value", "set it to 0 or 1");
    }
    case T::Integer: {
      const std::string s(v);
      char* end = nullptr;
      errno = 0;
      const long long n = std::strtoll(s.c_str(), &end, 10);
      std::string range = "[";  // built by appends: GCC 12 warns (-Wrestrict) on "[" + std::to_string(...)
      range.append(std::to_string(k.lo)).append(", ").append(std::to_string(k.hi)).append("]");
      if (s.empty() || end != s.c_str() + s.size() || errno == ERANGE)
        bad_value(k, v, "not a whole number", "set it to an integer in " + range);
      if (n < k.lo || n > k.hi) bad_value(k, v, "outside " + range, "set it to an integer in " + range);
      return std::to_string(n);
    }
    case T::Choice: {
      std::string_view rest = k.choices;
      while (!rest.empty()) {
        const size_t bar = rest.find('|');
        if (rest.substr(0, bar) == v) return std::string(v);
        rest = bar == std::string_view::npos ? std::string_view() : rest.substr(bar + 1);
      }
      bad_value(k, v, "not one of " + std::string(k.choices), "set it to one of them");
    }
  }
  LT_ASSERT(false);
  return {};
}

bool knob_on(const char* name) {
  const Knob& k = knob(name);
  LT_ASSERT(k.type == T::Switch);
  return value_now(k) == "1";
}

int64_t knob_int(const char* name) {
  const Knob& k = knob(name);
  LT_ASSERT(k.type == T::Integer);
  return std::stoll(value_now(k));
}

std::string knob_choice(const char* name) {
  const Knob& k = knob(name);
  LT_ASSERT(k.type == T::Choice);
  return value_now(k);
}

void check_knob_environment(char** env) {
  constexpr std::string_view kPrefix = "LEANTRAIN_";
  for (char** e = env; e && *e; ++e) {
    const std::string_view entry(*e);
    if (entry.substr(0, kPrefix.size()) != kPrefix) continue;
    const size_t eq = entry.find('=');
    const std::string_view name = entry.substr(0, eq);
    const std::string_view value = eq == std::string_view::npos ? std::string_view() : entry.substr(eq + 1);
    const Knob* k = find_knob(name);
    // Knobs that became flags (issue 43: they change memory, or users need them).
    for (auto [old, flag] : {std::pair{"LEANTRAIN_DIST_TIMEOUT", "--dist-timeout SECONDS"},
                             {"LEANTRAIN_FSDP_GATHER", "--fsdp-gather compute|f32"}, {"LEANTRAIN_BUCKET_MB", "--bucket-mb N"},
                             {"LEANTRAIN_BUCKETS_IN_FLIGHT", "--buckets-in-flight N"}})
      if (!k && name == old)
        throw UsageError("environment variable " + std::string(name), "it is a flag now, which the plan reads too",
                         "unset it and pass " + std::string(flag));
    if (!k)
      throw UsageError("environment variable " + std::string(name), "leantrain has no such knob",
                       "unset it or fix its name; `leantrain knobs` lists every knob");
    if (!value.empty()) parse_knob(*k, value);
  }
}

std::vector<std::pair<std::string, std::string>> knobs_changed() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const Knob& k : kKnobs) {
    if (k.use != U::Run) continue;
    const std::string v = value_now(k);
    if (v != parse_knob(k, k.fallback)) out.emplace_back(k.name, v);
  }
  return out;
}

std::string knobs_header() {
  std::string s;
  for (const auto& [name, value] : knobs_changed()) s += (s.empty() ? "knobs: " : ", ") + name + "=" + value;
  return s;
}

std::string knobs_json() {
  std::string s = "{";
  for (const auto& [name, value] : knobs_changed()) s += (s.size() > 1 ? ", \"" : "\"") + name + "\": \"" + value + "\"";
  return s + "}";
}

std::string knobs_listing() {
  std::string s =
      "Environment knobs (LEANTRAIN_*): switches for measuring kernels and strategies, read once per run.\n"
      "Values: 0|1 switches (also off/on), integers within their range, seconds, or one of the words.\n"
      "memory: yes = changes the memory a run uses (`leantrain plan` reads the same value);\n"
      "unchecked = a kernel choice whose memory has not been compared. '*' marks a value set now.\n";
  const char* group = "";
  for (const Knob& k : kKnobs) {
    if (std::strcmp(group, k.group) != 0) {
      group = k.group;
      s += std::string("\n") + group + ":\n";
    }
    std::string type = k.type == T::Integer   ? "integer " + std::to_string(k.lo) + ".." + std::to_string(k.hi)
                       : k.type == T::Choice  ? std::string(k.choices)
                                              : std::string(type_name(k.type));
    const char* mem = k.memory == M::Yes ? "yes" : k.memory == M::No ? "no" : "unchecked";
    const char* now = std::getenv(k.name);
    char line[512];
    std::snprintf(line, sizeof line, "  %-30s %-16s default %-8s memory %s%s\n      %s\n", k.name, type.c_str(),
                  k.fallback, mem, now && *now ? (std::string(" * set: ") + now).c_str() : "", k.what);
    s += line;
  }
  return s;
}

}  // namespace lt
