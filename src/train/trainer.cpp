#include "train/trainer.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/knobs.h"
#include "io/text_format.h"
#include "leantrain/autocast.h"
#include "leantrain/autograd.h"
#include "leantrain/checkpoint.h"
#include "leantrain/fused_step.h"
#include "leantrain/precision.h"
#include "dist/data_parallel.h"
#include "offload/offload_optimizer.h"
#include "train/offload_hooks.h"
#include "train/param_offload.h"
#include "train/precision_hooks.h"
#include "train/dpo.h"

namespace lt {

namespace {

std::unique_ptr<Optimizer> build_optimizer(const RunConfig& c, const std::vector<NamedTensor>& named, Device device) {
  if (c.offload != OffloadKind::None) {  // validate() refused what they cannot take
    offload::OffloadOptions o;
    o.device = device;
    o.kind = c.optimizer;
    o.adamw.lr = o.lion.lr = o.sgd.lr = c.lr;
    o.adamw.weight_decay = o.lion.weight_decay = o.sgd.weight_decay = c.weight_decay;
    o.adamw.beta1 = c.beta1;
    o.adamw.beta2 = c.beta2;
    o.adamw.eps = c.eps;
    o.sgd.momentum = c.momentum;
    o.sgd.dampening = c.dampening;
    o.sgd.nesterov = c.nesterov;
    o.adamw8bit.lr = o.lion8bit.lr = c.lr;
    o.adamw8bit.weight_decay = o.lion8bit.weight_decay = c.weight_decay;
    o.adamw8bit.beta1 = c.beta1;
    o.adamw8bit.beta2 = c.beta2;
    o.adamw8bit.eps = c.eps;
    o.disk_dir = c.offload_dir;
    o.host_limit = c.host_memory_limit;
    return std::make_unique<offload::OffloadOptimizer>(decay_groups(named), o);
  }
  OptimizerConfig oc;
  oc.kind = c.optimizer;
  oc.lr = c.lr;
  oc.weight_decay = c.weight_decay;
  oc.beta1 = c.beta1;
  oc.beta2 = c.beta2;
  oc.eps = c.eps;
  oc.momentum = c.optimizer == OptimizerKind::Sgd ? c.momentum : 0.0;
  oc.dampening = c.dampening;
  oc.nesterov = c.nesterov;
  oc.master_weights = c.master_weights == MasterWeights::Fp32;
  oc.stochastic_rounding = c.stochastic_rounding;
  oc.seed = c.seed;
  if (c.state_dtype != StateDtype::Auto) oc.state_dtype = c.state_dtype == StateDtype::Bf16 ? DType::BF16 : DType::F32;
  // Biases and norm weights do not decay, as in every transformer recipe.
  std::unique_ptr<Optimizer> opt = make_optimizer(oc, decay_groups(named));
  // --keep-casts (LEANTRAIN_KEEP_CASTS=1 its environment form, which leantrain_bench reads too): the
  // 16-bit weight copies kept between steps (a -mixed policy).
  if (c.keep_casts || knob_on("LEANTRAIN_KEEP_CASTS"))
    if (const std::optional<DType> dt = precision_policy(c.precision).compute_dtype) opt->set_kept_casts(*dt);
  return opt;
}

LrSchedule build_schedule(const RunConfig& c, int64_t total) {
  LrSchedule s;
  s.lr = c.lr;
  s.warmup_steps = c.warmup >= 0 ? c.warmup : total / 10;
  s.total_steps = total;
  s.min_lr = c.lr * c.min_lr_ratio;
  if (c.schedule == ScheduleKind::Cosine) s.kind = LrScheduleKind::WarmupCosine;
  else s.kind = s.warmup_steps > 0 ? LrScheduleKind::WarmupConstant : LrScheduleKind::Constant;
  return s;
}


}  // namespace

int64_t total_steps_for(const RunConfig& c, int64_t steps_per_epoch) {
  if (c.steps > 0) return c.steps;
  double epochs = c.epochs > 0 ? c.epochs : 1.0;  // --epochs 0 --steps 0: one epoch
  return std::max<int64_t>(1, int64_t(std::ceil(epochs * double(steps_per_epoch))));
}

int64_t steps_per_epoch(const RunConfig& c, int64_t micro_batches) {
  int64_t k = c.batch / (c.micro_batch ? c.micro_batch : c.batch);
  return std::max<int64_t>(1, micro_batches / k);
}

Trainer::Trainer(const RunConfig& cfg, Task& task) : cfg_(cfg), task_(task) {
  // Frozen parameters (Module::set_trainable) get neither optimizer state nor a share of the clip norm.
  auto named = model().named_trainable_parameters();
  for (auto& [n, p] : named) params_.push_back(p);
  // ZeRO / FSDP: this rank's optimizer steps (and keeps state for) its shard only.
  opt_ = build_optimizer(cfg_, dist::owned_parameters(cfg_, model(), named), task_.device);
  total_steps_ = total_steps_for(cfg_, steps_per_epoch(cfg_, loader().batches_per_epoch()));
  schedule_ = build_schedule(cfg_, total_steps_);
  micro_batch_ = cfg_.micro_batch ? cfg_.micro_batch : cfg_.batch;
  model().train();
  // The techniques' step hooks (precision, offload, strategy) are added by assemble_run
  // (train/techniques.cpp), --offload params' host-resident weights before this constructor.
}

double Trainer::epochs_done() const {
  const DataLoader& l = *task_.train;
  return double(l.epoch()) + double(l.index()) / double(l.batches_per_epoch());
}

void Trainer::start() {
  for (auto& h : hooks_) h->on_start(*this);
  // After the hooks: the pass sees the model the first step sees (its dtypes, fsdp's gathers).
  // Every rank of a job runs the whole pass (fsdp's gathers need them all in step), at its share
  // of the micro-batch, so the pass holds no more rows at a time than a training micro-batch.
  if (task_.objective && task_.objective->needs_reference_pass()) {
    const int64_t w = dist::world().size();
    const int64_t rows = micro_batch_ % w == 0 ? micro_batch_ / w : micro_batch_;
    task_.objective->compute_reference(model(), task_.device, rows, task_.loader_workers, cfg_.precision);
  }
}

StepOutcome Trainer::step() {
  StepOutcome out;
  const int64_t k = cfg_.batch / micro_batch_;
  const int64_t step_number = step_ + 1;  // 1-based, as printed
  // Set before backward: an optimizer step fused into backward uses it there.
  out.lr = schedule_.at(step_);
  opt_->set_lr(out.lr);
  double loss_sum = 0;
  trace_.begin();
  // --fused-step with --clip: the updates need the global norm before the first one, so the
  // batch's forward and backward run twice: a norm pass that only measures (FusedStep), then
  // the updating pass, dropout rewound so that both see the same network.
  FusedStep* fused = nullptr;
  for (auto& h : hooks_)
    if (!fused) fused = h->fused_step();
  const bool norm_pass = fused && cfg_.clip > 0;
  // The micro-batches' losses are read after the last backward, not after each forward: a read
  // waits for the device, and then for the other ranks (their mean), so the host stops feeding the
  // GPU mid-step; over several ranks that wait also adds their timing jitter to every micro-batch
  // (ddp on 2 H200s: 0.7% faster without it). A fused step updates parameters inside backward,
  // so it still checks each loss before its backward.
  const bool read_after = !fused;
  std::vector<Tensor> losses;
  // Unclipped with the norm from the update: each loss is copied to the host as its forward ends
  // and read there, so the host waits for the forwards, not for the backward queued behind them.
  const bool early_reads = read_after && norm_in_update();
  if (early_reads) {
    if (!loss_readback_) loss_readback_ = std::make_unique<ScalarReadback>(device(), size_t(k));
    loss_readback_->clear();
  }
  // The loss of micro-batch i, reduced over the ranks and checked: a non-finite one stops the run
  // (every rank alike, since they check the same mean) before any parameter changes.
  auto take_loss = [&](const Tensor& loss, int64_t i) {
    double value = early_reads          ? loss_readback_->read(size_t(i))  // 0 in a plan too
                   : device().is_meta() ? 0.0                              // a plan's dry-run has no values
                                        : loss.item();
    for (auto& h : hooks_) value = h->reduce_loss(value);
    if (!std::isfinite(value)) {
      std::string where = "at step " + std::to_string(step_number) +
                          (k > 1 ? " (micro-batch " + std::to_string(i + 1) + " of " + std::to_string(k) + ")" : "");
      throw NumericError("the training loss is " + std::string(std::isnan(value) ? "NaN" : "infinite") + " " + where,
                         "training diverged" + (step_ > 0 ? std::string() : std::string(" at once")),
                         "lower the learning rate, e.g. --lr " + short_number(cfg_.lr / 10, 3) +
                             ", or clip gradients with --clip 1.0");
    }
    loss_sum += value;
  };
  // After a norm pass: the clip coefficient for the updating pass, or the run stops (before any
  // parameter changed).
  auto finish_norm_pass = [&]() {
    const GradNorm gn = fused->finish_norm_pass(cfg_.clip);
    out.grad_norm = gn.norm;
    if (!gn.finite())
      throw nonfinite_norm(gn.norm, step_number, "training diverged; the norm pass found it before any parameter changed",
                           false);
    fused->set_grad_scale(gn.grad_scale);
  };
  // Forward and backward both under the policy's autocast: a recomputed forward sees it too.
  AutocastGuard autocast(precision_policy(cfg_.precision).compute_dtype);
  auto next_batch = [&]() {
    MemoryCategoryScope in(Category::Input);
    Batch b = loader().next();
    for (auto& h : hooks_) h->on_batch(b);
    out.items += task_.items(b);
    return b;
  };
  // The loss of one micro-batch as its backward starts from it (1/k of it, then the hooks' scale).
  auto backward_root = [&](Tensor loss) {
    Tensor scaled = k > 1 ? scale(loss, 1.0 / double(k)) : loss;
    for (auto& h : hooks_) scaled = h->scale_loss(scaled);
    return scaled;
  };
  const bool breadth_first = fused && k > 1;
  if (breadth_first) {
    // --fused-step with micro-batches (validate() asked for checkpointing): breadth-first. Every
    // micro-batch's forward runs first, keeping only what its checkpointed regions keep; then one
    // backward over all of them runs depth by depth (InterleavedSequence), each region's
    // parameter gradients routed to the outer engine (RouteParamGradsScope), so a block's
    // gradient is complete, applied and freed once every micro-batch has passed its depth: no
    // gradient buffer outlives a block. The arithmetic is accumulation's, in the same order.
    std::vector<Batch> batches;
    for (int64_t i = 0; i < k; ++i) batches.push_back(next_batch());
    const std::vector<Generator*> gens = nn::dropout_generators(model());
    const std::vector<uint64_t> offsets = generator_offsets(gens);
    // The losses are read after the last forward (one wait for the device, not one per
    // micro-batch) and before the backward, whose fused updates must not start on a non-finite one.
    auto forward_all = [&](bool keep_losses) {
      MemoryCategoryScope act(Category::Activation);
      std::vector<Tensor> roots, kept;
      RouteParamGradsScope routed;
      InterleavedSequence lanes(k);
      for (int64_t i = 0; i < k; ++i) {
        lanes.begin_lane(i);
        Tensor loss = micro_batch_loss(task_, model(), batches[size_t(i)]);
        if (keep_losses) {
          if (cfg_.debug_nan_at_step == step_number) loss = scale(loss, std::numeric_limits<double>::quiet_NaN());
          kept.push_back(loss.detach());
        }
        roots.push_back(backward_root(std::move(loss)));
        lanes.end_lane();
      }
      for (size_t i = 0; i < kept.size(); ++i) take_loss(kept[i], int64_t(i));
      return roots;
    };
    if (norm_pass) {
      fused->begin_norm_pass();
      {
        std::vector<Tensor> roots = forward_all(false);
        MemoryCategoryScope act(Category::Activation);
        run_backward(roots);
      }
      finish_norm_pass();
      set_generator_offsets(gens, offsets);
    }
    std::vector<Tensor> roots = forward_all(true);
    trace_.mark(StepTrace::Forward);
    batches.clear();  // the inputs are not needed by backward unless a node saved them
    {
      MemoryCategoryScope act(Category::Activation);
      run_backward(roots);
    }
    trace_.mark(StepTrace::Backward);
  }
  for (int64_t i = 0; i < k && !breadth_first; ++i) {
    Batch b = next_batch();
    MemoryCategoryScope act(Category::Activation);
    if (norm_pass) {
      const std::vector<Generator*> gens = nn::dropout_generators(model());
      const std::vector<uint64_t> offsets = generator_offsets(gens);
      fused->begin_norm_pass();
      {
        Tensor l = micro_batch_loss(task_, model(), b);
        for (auto& h : hooks_) l = h->scale_loss(l);
        l.backward();
      }
      finish_norm_pass();
      set_generator_offsets(gens, offsets);
    }
    Tensor loss = micro_batch_loss(task_, model(), b);
    if (cfg_.debug_nan_at_step == step_number) loss = scale(loss, std::numeric_limits<double>::quiet_NaN());
    if (read_after) {
      losses.push_back(loss.detach());
      if (early_reads) loss_readback_->push(losses.back());
    } else {
      take_loss(loss, i);
    }
    trace_.mark(StepTrace::Forward);
    Tensor scaled = backward_root(std::move(loss));
    b = Batch();  // the inputs are not needed by backward unless a node saved them
    scaled.backward();
    trace_.mark(StepTrace::Backward);
  }
  // Updates that ran beside the backward (LEANTRAIN_OPT_STREAM): the compute stream waits for them
  // before anything reads a parameter again.
  if (fused) fused->join();
  // The previous step's norm, measured by its update (ahead of this step's forward in the stream),
  // then this step's losses: one wait for the device, which the loss read makes anyway.
  settle_norm();
  for (size_t i = 0; i < losses.size(); ++i) take_loss(losses[i], int64_t(i));
  losses.clear();
  out.loss = loss_sum / double(k);
  if (task_.objective) {  // read with the losses, after backward; means over the ranks as the loss is
    out.metrics = metric_list(task_.objective->take_metrics());
    for (Metric& m : out.metrics)
      for (auto& h : hooks_) m.value = h->reduce_loss(m.value);
  }

  bool apply = true;
  for (auto& h : hooks_) apply = h->after_backward(*this) && apply;
  trace_.mark(StepTrace::Reduce);
  bool owned = false;
  for (auto& h : hooks_) owned = owned || h->owns_optimizer_step();

  if (apply && !owned && norm_in_update()) {
    // Unclipped: the norm needs no pass of its own. The update sums the gradients' squares as it
    // reads them (leaving an element whose gradient is not finite as it was), and the norm is
    // read and checked at the next step, so the host goes on to the next batch while the update
    // runs (docs/decisions.md, "The unclipped step's norm can come from its update").
    Tensor sumsq;
    {
      MemoryCategoryScope ws(Category::Workspace);
      sumsq = zeros({1}, DType::F32, params_.front().device());
    }
    trace_.mark(StepTrace::Norm);
    {
      MemoryCategoryScope st(Category::OptimizerState);
      opt_->step_measuring(sumsq);
    }
    trace_.mark(StepTrace::Optimizer);
    if (!norm_readback_) norm_readback_ = std::make_unique<ScalarReadback>(device(), 1);
    norm_readback_->clear();
    norm_readback_->push(sumsq);  // copied as the update ends; read at the next step
    pending_ = PendingNorm{std::move(sumsq), step_number, out.loss, std::nullopt};
    out.grad_norm = std::numeric_limits<double>::quiet_NaN();
    out.grad_norm_pending = true;
  } else if (apply && !owned) {
    float pre = 1.0f;
    for (auto& h : hooks_) pre *= h->grad_pre_scale();
    GradNorm gn;
    {
      MemoryCategoryScope ws(Category::Workspace);
      gn = clip_grad_norm(params_, cfg_.clip, pre);
    }
    // A rank holding a shard of the gradients has its shard's norm: clip by the whole one.
    for (auto& h : hooks_)
      if (const double n = h->reduce_grad_norm(gn.norm); n != gn.norm)
        gn = grad_norm_from_sum_squares((n / pre) * (n / pre), cfg_.clip, pre);
    out.grad_norm = gn.norm;
    trace_.mark(StepTrace::Norm);
    bool skip = false;
    if (!gn.finite())
      for (auto& h : hooks_) skip = h->skip_nonfinite_step(*this) || skip;
    if (!gn.finite() && !skip)
      throw nonfinite_norm(gn.norm, step_number, "training diverged (the loss was " + short_number(out.loss, 3) + ")",
                           true);
    if (skip) {
      apply = false;  // e.g. a loss-scale overflow: no parameter or state changes
      // ... but the same allocations as an applied step (Note [Dry compute], backend/dry_compute.h),
      // so the memory layout after it does not depend on the data: the plan stays exact.
      MemoryCategoryScope st(Category::OptimizerState);
      opt_->dry_step(gn.grad_scale);
    } else {
      MemoryCategoryScope st(Category::OptimizerState);
      opt_->step(gn.grad_scale);
    }
    trace_.mark(StepTrace::Optimizer);
  }
  out.applied = apply;
  opt_->zero_grad(true);
  for (auto& h : hooks_) h->after_step(*this, apply);
  ++step_;
  trace_.mark(StepTrace::After);
  trace_.end_step(step_);
  return out;
}

NumericError Trainer::nonfinite_norm(double norm, int64_t step, const std::string& why, bool suggest_clip) const {
  return NumericError("the gradient norm is " + short_number(norm, 3) + " at step " + std::to_string(step), why,
                      "lower the learning rate, e.g. --lr " + short_number(cfg_.lr / 10, 3) +
                          (suggest_clip ? ", or clip gradients with --clip 1.0" : ""));
}

// A loss scale (which may skip the update, and leaves 1/scale on the gradients) and data
// parallelism say no through their hooks (norm_before_update).
bool Trainer::norm_in_update() const {
  if (!norm_in_update_on_ || cfg_.clip > 0 || params_.empty() || !opt_->measures_norm()) return false;
  for (const auto& h : hooks_)
    if (h->norm_before_update()) return false;
  return true;
}

double Trainer::read_pending_norm() {
  if (!pending_.norm) {
    const double sum = norm_readback_->read(0);  // pushed with the pending sum (0 in a plan)
    pending_.norm = std::sqrt(sum);
  }
  const double norm = *pending_.norm;
  if (!std::isfinite(norm))
    throw nonfinite_norm(norm, pending_.step,
                         "training diverged (the loss was " + short_number(pending_.loss, 3) +
                             "); the update left the non-finite gradients' elements as they were",
                         true);
  return norm;
}

void Trainer::settle_norm() {
  if (!pending_.sumsq.defined()) return;
  const double norm = read_pending_norm();
  settled_ = {pending_.step, norm};
  pending_ = PendingNorm{};
  if (norm_readback_) norm_readback_->clear();
}

double Trainer::grad_norm_of(int64_t step) {
  if (pending_.sumsq.defined() && pending_.step == step) return read_pending_norm();
  if (settled_.first == step) return settled_.second;
  return std::numeric_limits<double>::quiet_NaN();
}

EvalInfo Trainer::evaluate() {
  settle_norm();  // before the weights are read (and saved after)
  InferenceModeGuard inference;
  MemoryCategoryScope act(Category::Activation);
  AutocastGuard autocast(precision_policy(cfg_.precision).compute_dtype);
  model().eval();
  EvalInfo e;
  try {
    e = evaluate_task(
        task_, micro_batch_, cfg_.eval_batches,
        [this](Batch& b) {
          bool counts = true;
          for (auto& h : hooks_) counts = h->on_eval_batch(b) && counts;
          return counts;
        },
        [this](EvalSums& s) {
          for (auto& h : hooks_) h->reduce_eval(s);
        });
  } catch (...) {
    model().train();
    throw;
  }
  model().train();
  e.step = step_;
  return e;
}

}  // namespace lt
