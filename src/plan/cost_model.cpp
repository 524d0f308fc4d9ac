// The budget search's cost model: one optimizer step's time on the reference GPU (an H200 running
// leantrain's own kernels), from the model's FLOPs and sizes (CheckpointProfile) and the config.
//
//   step = compute + recompute + micro-batch overhead + optimizer + fused-step overhead
//   compute    = 3 F b / (R[precision] e(n))          F: forward FLOPs per sample (op shapes),
//   recompute  =   F_r b / (R[precision] e(n))         F_r: recomputed FLOPs per sample
//                e(n) = n / (n + kHalfEfficiencyRows)  n = micro-batch x tokens per sample: small
//                                                      micro-batches make small, slower GEMMs
//   micro-batch overhead = k (kSecondsPerModuleCall x module calls       k micro-batches: launches
//                           + kWeightPasses x parameter bytes / kBandwidth)   and weight re-reads
//   optimizer  = parameters x bytes moved per parameter x seconds per byte (plain or 8-bit kernel)
//                + optimizer_seconds_per_tensor x parameter tensors (its launches)
//   fused      = kFusedSecondsPerTensor x parameter tensors  (one update launch per parameter)
//   selective  = recompute of kSelectiveShareOfBlocks x the blocks' forward FLOPs (elementwise work)
//   --fused-step with --clip: compute, recompute and micro-batch overhead twice (the norm pass),
//                plus one sum-of-squares launch per parameter tensor (at the optimizer's cost)
//
// Every constant is in kCost below; bench/cost_model.sh measures step times on the GPU and prints
// them against these predictions (docs/memory-model.md, "The cost model"). The first values came
// from the memory ladder's H200 throughputs (ViT-L/16); the current ones are refit on the first
// H200 run of bench/cost_model.sh (bench/results/cost-model-h200-66a59e5.md, in-sample):
// checkpoint recompute fixes R x e(n), micro-batch 16/8/2 the per-module-call cost (small
// micro-batches are launch-bound), bf16 state and AdamW8bit against AdamW the seconds per byte,
// the base step the optimizer's per-tensor cost, the fused step its per-tensor overhead. 32-true's
// R alone was refit later, on the 902e56b run (cost-model-h200-902e56b.md), after the f32
// attention kernel made f32 steps twice as fast.
//
// With --devices W (2+), `--batch` is the global batch: a rank's step is the formula above for its
// batch / W rows (smaller GEMMs), its optimizer shard (1/W under zero1/zero2/fsdp), plus
//   communication = kCommShareOfCompute x (compute + recompute + micro-batch overhead)
//                 + kCommSecondsPerByte x ring bytes per rank
// where the ring bytes are, with G the gradients' bytes, P the parameters' and k micro-batches,
//   ddp: 2(W-1)/W G;  zero1: that + (W-1)/W P (the updated shards gathered);
//   zero2: G (a reduce to each owner) + (W-1)/W P;
//   fsdp: (W-1)/W P k x (2 with reshard-after-forward or checkpointing: forward and backward
//         gathers; 1 without) + (W-1)/W G k (every micro-batch's gradients reduced), P counted
//         at 2 bytes a parameter when the blocks are gathered in 16 bits (dist::fsdp_gather_dtype).
// The two constants are a least-squares fit to the 2- and 4-H200 runs (GPT-2 124M ddp on 2 and 4,
// fsdp on 4; TinyLlama fsdp on 2 and 4: bench/results/dist-h200x2-125c0be.md,
// dist-h200x4-6b5dcfd.md; all gathered in f32 then), each rank's overhead over one GPU's step
// predicted within 0.7 ms (GPT-2, 47 ms steps) and 1.1 ms (TinyLlama, 110 ms). The first term is what overlapping costs
// (NCCL's kernels share the SMs and memory with backward), the second what is not overlapped.
// The search minimises device-seconds (StepCost::cost): a run on more GPUs is chosen when it saves
// recomputation, offloading or a leaner state worth more than its GPUs and communication.
//
// A leaner optimizer state (bf16 moments, 8-bit) is never chosen for speed: it pays a penalty of
// kStatePenalty of the step plus whatever optimizer time it would save, so the search takes it
// only when memory needs it. The penalty is a preference (state precision can cost accuracy), not
// time: StepCost keeps it apart, and the bench compares seconds() only.
#include <algorithm>

#include "dist/data_parallel.h"
#include "leantrain/plan.h"
#include "leantrain/precision.h"

namespace lt {

namespace {

struct CostConstants {
  // Refit on the H200 (bench/results/cost-model-h200-66a59e5.md: ViT-B/16 batch 32, 14 candidates).
  double flops_per_s_f32 = 42.5e12;    // 32-true (FP32 GEMMs, no TF32): refit on 902e56b's 32-true row
  double flops_per_s_mixed = 290e12;   // 16-mixed, bf16-mixed (autocast: casts, f32 norms)
  double flops_per_s_16 = 300e12;      // 16-true, bf16-true
  double half_efficiency_rows = 600;   // GEMM rows (tokens) at which a GEMM runs at half its rate
  double seconds_per_module_call = 26e-6;  // host + launches per module call per micro-batch, fwd + bwd
  double weight_passes = 4;            // per micro-batch: forward read, backward read, grad read+write
  double bandwidth = 3.0e12;           // bytes/s for weight re-reads
  double optimizer_s_per_byte = 0.28e-12;       // sgd/adamw/lion kernels, per byte moved (~3.6 TB/s)
  double optimizer_8bit_s_per_byte = 0.84e-12;  // adamw8bit/lion8bit block kernels
  double optimizer_seconds_per_tensor = 11e-6;  // the optimizer's launches, per parameter tensor
  double fused_seconds_per_tensor = 36e-6;      // --fused-step: one update per parameter in backward
  // --checkpoint selective: its extra step time over `blocks`' on the H200 (0eaa6d2, bf16-mixed,
  // bench/results/checkpoint-modes-h200-0eaa6d2.md): ViT-L/16 b32 +5 ms vs +12 ms, GPT-2 124M
  // 8x1024 +3 ms vs +6 ms; counted as that share of the blocks' forward FLOPs.
  double selective_share_of_blocks = 0.45;
  double state_penalty_bf16 = 0.03;    // of the step: preference for the user's state precision
  double state_penalty_8bit = 0.05;
  // --devices 2+ (see the header): fit on 5 measured runs on 2 and 4 H200s over NVLink.
  double comm_share_of_compute = 0.0674;
  double comm_seconds_per_byte = 0.636e-12;
};
constexpr CostConstants kCost;

double flops_per_s(Precision p) {
  if (p == Precision::True32) return kCost.flops_per_s_f32;
  if (p == Precision::Mixed16 || p == Precision::MixedBf16) return kCost.flops_per_s_mixed;
  return kCost.flops_per_s_16;
}

// Bytes an optimizer step moves per parameter: parameter read and write, gradient read, each
// moment read and written.
double optimizer_bytes(const RunConfig& c) {
  const PrecisionPolicy pol = precision_policy(c.precision);
  const double pb = pol.low_precision_params() && c.master_weights != MasterWeights::Fp32 ? 2 : 4;
  const double gb = pol.low_precision_params() ? 2 : 4;
  const bool eight = is_eight_bit(c.optimizer);
  double sb = c.state_dtype == StateDtype::F32 ? 4 : c.state_dtype == StateDtype::Bf16 ? 2 : pb;
  if (eight) sb = 1 + 4.0 / 256;  // u8 codes + an f32 absmax per 256
  double moments = 0;
  if (c.optimizer == OptimizerKind::AdamW || c.optimizer == OptimizerKind::AdamW8bit) moments = 2;
  else if (c.optimizer == OptimizerKind::Lion || c.optimizer == OptimizerKind::Lion8bit) moments = 1;
  else if (c.optimizer == OptimizerKind::Sgd) moments = c.momentum > 0 ? 1 : 0;
  return 2 * pb + gb + moments * 2 * sb;
}

double optimizer_seconds(const RunConfig& c, const CheckpointProfile& m) {
  const bool eight = is_eight_bit(c.optimizer);
  return double(m.parameters) * optimizer_bytes(c) * (eight ? kCost.optimizer_8bit_s_per_byte : kCost.optimizer_s_per_byte) +
         kCost.optimizer_seconds_per_tensor * double(m.parameter_tensors);
}

bool leaner_state(const RunConfig& c, const RunConfig& base) {
  return c.optimizer != base.optimizer || c.state_dtype != base.state_dtype;
}

// The ring bytes one rank sends per step under c's strategy (see the header).
double communication_bytes(const RunConfig& c, const CheckpointProfile& m, double k) {
  const double w = double(c.devices);
  const PrecisionPolicy pol = precision_policy(c.precision);
  const double pb = double(m.parameters) * (pol.low_precision_params() && c.master_weights != MasterWeights::Fp32 ? 2 : 4);
  const double gb = double(m.parameters) * (pol.low_precision_params() ? 2 : 4);
  const double part = (w - 1) / w;
  if (c.strategy == StrategyKind::Zero1) return 2 * part * gb + part * pb;
  if (c.strategy == StrategyKind::Zero2) return gb + part * pb;
  if (c.strategy == StrategyKind::Fsdp) {
    const double gathers = c.reshard_after_forward || c.checkpoint.on() ? 2 : 1;
    const std::optional<DType> low = dist::fsdp_gather_dtype(c);  // the blocks gathered in 16 bits
    const double gathered = low ? double(m.parameters) * double(dtype_size(*low)) : pb;
    return part * gathered * k * gathers + part * gb * k;
  }
  return 2 * part * gb;  // ddp
}

}  // namespace

StepCost predict_step_cost(const RunConfig& c, const CheckpointProfile& m, double recompute_flops, const RunConfig& base) {
  if (c.devices > 1) {  // one rank: its rows of the batch, its optimizer shard, the communication
    RunConfig r = c;
    r.devices = 1;
    r.batch = c.batch / c.devices;
    r.micro_batch = c.micro_batch / c.devices;
    RunConfig rb = base;
    rb.devices = 1;
    StepCost s = predict_step_cost(r, m, recompute_flops, rb);
    s.devices = c.devices;
    if (c.strategy != StrategyKind::Ddp) s.optimizer /= double(c.devices);
    const double k = double(c.batch) / double(c.micro_batch ? c.micro_batch : c.batch);
    s.communication_bytes = communication_bytes(c, m, k);
    s.communication = kCost.comm_share_of_compute * (s.compute + s.recompute + s.micro_batches) +
                      kCost.comm_seconds_per_byte * s.communication_bytes;
    if (s.penalty > 0) {  // against the asked state on the same ranks
      RunConfig asked = c;
      asked.optimizer = base.optimizer;
      asked.state_dtype = base.state_dtype;
      const bool eight = is_eight_bit(c.optimizer);
      const double asked_optimizer = optimizer_seconds(asked, m) / (c.strategy != StrategyKind::Ddp ? double(c.devices) : 1.0);
      s.penalty = (eight ? kCost.state_penalty_8bit : kCost.state_penalty_bf16) * s.seconds() +
                  std::max(0.0, asked_optimizer - s.optimizer);
    }
    return s;
  }
  StepCost s;
  const double mb = double(c.micro_batch ? c.micro_batch : c.batch);
  const double k = double(c.batch) / mb;
  const double rows = mb * double(std::max<int64_t>(m.tokens_per_sample, 1));
  const double rate = flops_per_s(c.precision) * rows / (rows + kCost.half_efficiency_rows);
  s.compute = 3 * m.forward_flops * double(c.batch) / rate;
  s.recompute_flops = recompute_flops * double(c.batch);
  s.recompute = s.recompute_flops / rate;
  // Parameter bytes as the run holds them: the profile's are in its own precision's dtype.
  const double pbytes = double(m.parameters) * (precision_policy(c.precision).low_precision_params() ? 2 : 4);
  s.micro_batches = k * (kCost.seconds_per_module_call * double(m.module_calls) + kCost.weight_passes * pbytes / kCost.bandwidth);
  s.optimizer = optimizer_seconds(c, m);
  s.fused = c.fused_step ? kCost.fused_seconds_per_tensor * double(m.parameter_tensors) : 0;
  if (c.fused_step && c.clip > 0) {  // the norm pass: the step's forward and backward once more
    s.compute *= 2, s.recompute *= 2, s.recompute_flops *= 2, s.micro_batches *= 2;
    s.fused += kCost.optimizer_seconds_per_tensor * double(m.parameter_tensors);
  }
  if (leaner_state(c, base)) {
    RunConfig asked = c;
    asked.optimizer = base.optimizer;
    asked.state_dtype = base.state_dtype;
    const bool eight = is_eight_bit(c.optimizer);
    s.penalty = (eight ? kCost.state_penalty_8bit : kCost.state_penalty_bf16) * s.seconds() +
                std::max(0.0, optimizer_seconds(asked, m) - s.optimizer);
  }
  return s;
}

double selective_recompute_flops(const CheckpointProfile& m) {
  return kCost.selective_share_of_blocks * m.flops_of(m.blocks);
}

void add_cost_prediction(PlanResult& r) {
  const CheckpointProfile m = profile_model(r.config, false);
  const StepCost s = predict_step_cost(r.config, m, m.checkpoint_flops, r.config);
  r.predicted_step_seconds = s.seconds();
  r.forward_flops = m.forward_flops * double(r.config.batch);
  r.recompute_flops = s.recompute_flops;
}

}  // namespace lt
