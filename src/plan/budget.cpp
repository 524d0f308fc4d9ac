// fit_budget: the cheapest config that fits a memory budget.
//
// Knobs: precision (the given one, bf16-mixed, bf16-true) x micro-batch (divisors of --batch) x
// optimizer-state precision (the given one, bf16 moments, the 8-bit variant of the optimizer) x
// fused step, and for each such combination a checkpoint set: the first k units of the model's
// checkpoint order (profile_model: most activation bytes saved per recompute FLOP first), or
// `selective` (every block, matmul results kept: a third of the activations for elementwise
// recompute only).
//
// --offload-activations is the step past everything checkpointed: a combination that does not fit
// with every unit checkpointed is planned once more with the units' saved inputs offloaded to
// pinned host memory (also the leanest-combination check below uses it before calling a
// combination hopeless). Its cost adds the time of the bytes it moves over PCIe (out in the
// forward, back in the backward, per micro-batch) at kOffloadBytesPerSecond, all of it: the
// copies overlap compute on their own stream, but how much is not modelled (a placeholder, to be
// refit on the GPU with bench/offload_activations.sh, as bench/cost_model.sh refits the others).
//
// With --devices N (plan --budget), the device count and the strategy are knobs too: 1, 2, 4, ...
// devices up to N and N itself (those that split the batch and micro-batch), each of 2+ under
// ddp, zero1, zero2, fsdp and fsdp with --reshard-after-forward false. `--batch` stays the global
// batch. A candidate's need is its largest rank's (every rank is planned under a sharded
// strategy, since shards differ by up to a parameter; ddp's ranks hold the same bytes, so rank 0
// alone), NCCL's buffers included. Costs are device-seconds per step (cost_model.cpp: each rank's
// share of the work plus its communication, times the devices), so more GPUs are chosen only when
// they save more than they cost; run_plan then also names the fastest fitting candidate on all N.
// `train --fit` keeps its job's device count (PlanOptions::fewer_devices) and searches strategies.
//
// --offload optimizer and --offload params are the last resort: when no device-only candidate
// fits, the cheapest combinations are planned again with their optimizer state (then also the
// checkpointed blocks' weights) in pinned host memory, everything checkpointed for params. Their
// time adds the host step and the PCIe traffic at the bandwidths measured on the GPU machine
// (kOffloadPcieBytesPerSecond, kHostStepBytesPerSecond below), all of it: the early host steps
// overlap backward, which the H100 measurement shows to be worth little next to the host step.
//
// Combinations are taken cheapest first by their cost with nothing checkpointed (a lower bound:
// checkpointing only adds recompute). For each, the need falls as k grows and the cost rises,
// so: plan k = 0; if it does not fit, plan selective when it is cheaper than the best so far,
// then the largest k still cheaper than the best found so far; if that fits, bisect for the
// smallest k that fits. The search stops when a combination's
// lower bound is no cheaper than the best. A combination is skipped without planning when one
// at least as lean on every axis could not fit even with everything checkpointed, or when
// validate() refuses it (the fused step with accumulation or 16-mixed). Every plan is
// a full meta dry run, so the chosen candidate's need is exact; the order and the bisection only
// decide which candidates get planned.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>

#include "leantrain/plan.h"
#include "leantrain/precision.h"

namespace lt {

namespace {

// Host<->device copy bandwidth for --offload-activations (pinned memory over PCIe 4/5, one
// direction at a time): a placeholder, not measured yet.
constexpr double kOffloadBytesPerSecond = 20e9;

// --offload optimizer / params, measured on the H100 machine (bench/results/offload-h100-b1f1975.md:
// 16 host cores, PCIe 5): pinned copies over PCIe, each direction (torch, 256 MiB: H2D 52.3,
// D2H 54.9 GB/s), and the host AdamW step's memory traffic on 16 threads (243 ms for 1.1B
// elements at 28 bytes each: 127 GB/s).
constexpr double kOffloadPcieBytesPerSecond = 53e9;
constexpr double kHostStepBytesPerSecond = 127e9;

std::vector<int64_t> micro_batches(int64_t batch) {
  std::vector<int64_t> out;
  for (int64_t m = batch; m >= 1; --m)
    if (batch % m == 0) out.push_back(m);
  return out;  // largest first
}

// The optimizer state a config keeps, as the table labels it: "f32", "bf16", "16-bit" or "8-bit".
std::string state_of(const RunConfig& c) {
  if (is_eight_bit(c.optimizer)) return "8-bit";
  if (c.state_dtype == StateDtype::F32) return "f32";
  if (c.state_dtype == StateDtype::Bf16) return "bf16";
  return precision_policy(c.precision).low_precision_params() ? "16-bit" : "f32";
}
// Leaner is higher: f32 state 0, 16-bit 1, 8-bit 2.
int state_rank(const RunConfig& c) {
  if (is_eight_bit(c.optimizer)) return 2;
  if (c.state_dtype != StateDtype::Auto) return c.state_dtype == StateDtype::F32 ? 0 : 1;
  return precision_policy(c.precision).low_precision_params() ? 1 : 0;
}

bool has_state(const RunConfig& c) { return c.optimizer != OptimizerKind::Sgd || c.momentum > 0; }

// The state precisions to try for `c` (its precision set): the user's, then bf16, then 8-bit.
std::vector<RunConfig> state_variants(const RunConfig& c) {
  std::vector<RunConfig> out = {c};
  if (!has_state(c)) return out;
  if (state_rank(c) == 0) {
    RunConfig b = c;
    b.state_dtype = StateDtype::Bf16;
    out.push_back(b);
  }
  if (c.optimizer == OptimizerKind::AdamW || c.optimizer == OptimizerKind::Lion) {
    RunConfig e = c;
    e.optimizer = c.optimizer == OptimizerKind::AdamW ? OptimizerKind::AdamW8bit : OptimizerKind::Lion8bit;
    e.state_dtype = StateDtype::Auto;
    out.push_back(e);
  }
  return out;
}

int64_t mb_of(const RunConfig& c) { return c.micro_batch ? c.micro_batch : c.batch; }

// The seconds an offloaded step adds, from the planned pinned-host bytes: the host step reads and
// writes the state, reads each gradient and writes each result (gradient-sized); PCIe carries the
// gradients out and the results back, and with --offload params the block weights in for every
// micro-batch's forward and again for its recomputation.
double offload_seconds(const RunConfig& c, const PlanResult& r) {
  auto host = [&](Category k) { return double(r.pinned_host.category[size_t(k)].peak); };
  const double grads = host(Category::Gradient), state = host(Category::OptimizerState);
  const double step = (2.0 * state + 2.0 * grads) / kHostStepBytesPerSecond;
  double pcie = 2.0 * grads;
  if (c.offload == OffloadKind::Params) pcie += 2.0 * host(Category::Parameter) * double(c.batch / mb_of(c));
  return step + pcie / kOffloadPcieBytesPerSecond;
}

// The same devices and strategy: candidates are compared for leanness only within such a group.
bool same_layout(const RunConfig& a, const RunConfig& b) {
  return a.devices == b.devices && a.strategy == b.strategy && a.reshard_after_forward == b.reshard_after_forward;
}

// a and b differ at most in their checkpoint set and activation offloading.
bool same_knobs(const RunConfig& a, const RunConfig& b) {
  return a.precision == b.precision && mb_of(a) == mb_of(b) && a.optimizer == b.optimizer &&
         a.state_dtype == b.state_dtype && a.fused_step == b.fused_step && same_layout(a, b);
}

// a needs no more memory than b on every axis (checkpointing aside).
bool leaner_or_equal(const RunConfig& a, const RunConfig& b) {
  return a.precision == b.precision && same_layout(a, b) && mb_of(a) <= mb_of(b) &&
         state_rank(a) >= state_rank(b) && (a.fused_step || !b.fused_step);
}

// The strategy as the table names it: fsdp with --reshard-after-forward false is "fsdp-keep".
std::string strategy_label(const RunConfig& c) {
  return name_of(c.strategy) + (c.strategy == StrategyKind::Fsdp && !c.reshard_after_forward ? "-keep" : "");
}

// "2 GPUs, fsdp-keep", "" on one device.
std::string layout_label(const RunConfig& c) {
  return c.devices < 2 ? "" : std::to_string(c.devices) + " GPUs, " + strategy_label(c);
}

// The device counts and strategies to search: `base.devices` and, when fewer are allowed, 1, 2,
// 4, ... below it; every strategy on 2+. One device keeps the default strategy fields, so its
// candidates compare equal whatever --strategy says.
std::vector<RunConfig> layouts(const RunConfig& base, bool fewer) {
  std::vector<int64_t> counts;
  if (fewer)
    for (int64_t d = 1; d < base.devices; d *= 2) counts.push_back(d);
  counts.push_back(std::max<int64_t>(1, base.devices));
  std::vector<RunConfig> out;
  const RunConfig defaults;
  for (int64_t d : counts) {
    RunConfig c = base;
    c.devices = d;
    if (d == 1) {
      c.strategy = defaults.strategy;
      c.reshard_after_forward = defaults.reshard_after_forward;
      out.push_back(c);
      continue;
    }
    for (StrategyKind strategy : {StrategyKind::Ddp, StrategyKind::Zero1, StrategyKind::Zero2, StrategyKind::Fsdp}) {
      c.strategy = strategy;
      c.reshard_after_forward = true;
      out.push_back(c);
    }
    c.reshard_after_forward = false;  // fsdp, each block kept from its forward to its backward
    out.push_back(c);
  }
  return out;
}

bool valid(RunConfig c) {
  c.device = "cpu";
  try {
    validate(c);
    return true;
  } catch (const UsageError&) {
    return false;
  }
}

std::string ckpt_label(const FitCandidate& k, const CheckpointProfile* p) {
  if (k.config.offload != OffloadKind::None) {
    FitCandidate kept = k;
    kept.config.offload = OffloadKind::None;
    return ckpt_label(kept, p) + (k.config.offload == OffloadKind::Params ? "+host-params" : "+host-opt");
  }
  if (k.config.offload_activations) {
    FitCandidate kept = k;
    kept.config.offload_activations = false;
    return ckpt_label(kept, p) + "+offload";
  }
  using Mode = nn::CheckpointSpec::Mode;
  if (k.config.checkpoint.mode == Mode::Selective) return "selective";
  if (k.units == 0) return "none";
  if (k.config.checkpoint.mode == Mode::Blocks) return "blocks";
  return std::to_string(k.units) + (p ? "/" + std::to_string(p->order.size()) : "") + " units";
}

std::string describe(const FitCandidate& k) {
  char buf[300];
  const std::string layout = layout_label(k.config);
  std::snprintf(buf, sizeof buf, "%s%s%s, micro-batch %lld, %s state (%s), checkpoint %s%s%s", layout.c_str(),
                layout.empty() ? "" : ", ", name_of(k.config.precision).c_str(), (long long)mb_of(k.config), k.state.c_str(),
                name_of(k.config.optimizer).c_str(), ckpt_label(k, nullptr).c_str(), k.config.fused_step ? ", fused step" : "",
                k.config.devices > 1 ? (", largest need on rank " + std::to_string(k.worst_rank)).c_str() : "");
  return buf;
}

std::string json_str(const std::string& v) {
  std::string e = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\') e += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) e += c;
  }
  return e + "\"";
}

}  // namespace

FitResult fit_budget(const RunConfig& base, int64_t budget, const PlanOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  FitResult f;
  f.budget = budget;
  {
    RunConfig v = base;
    v.device = "cpu";
    validate(v);  // the user's flags first: their errors, not a candidate's
  }
  // Profiles per precision, made when first needed (FLOPs and sizes do not depend on it, the
  // bytes each unit saves do).
  std::map<Precision, CheckpointProfile> profiles;
  auto profile = [&](Precision precision) -> const CheckpointProfile& {
    auto it = profiles.find(precision);
    if (it != profiles.end()) return it->second;
    RunConfig c = base;
    c.precision = precision;
    if (precision != base.precision) c.master_weights = MasterWeights::None;
    if (!precision_policy(precision).low_precision_params()) c.stochastic_rounding = false;
    return profiles.emplace(precision, profile_model(c)).first->second;
  };
  const CheckpointProfile& bp = profile(base.precision);
  const StepCost base_cost_parts = predict_step_cost(base, bp, bp.checkpoint_flops, base);
  const double base_seconds = base_cost_parts.seconds(), base_cost = base_cost_parts.cost();

  // The combinations, cheapest lower bound first.
  std::vector<Precision> precisions = {base.precision};
  for (Precision p : {Precision::MixedBf16, Precision::TrueBf16})
    if (base.precision != p) precisions.push_back(p);
  struct Combo {
    RunConfig cfg;
    double bound;
  };
  std::vector<Combo> combos;
  for (const RunConfig& layout : layouts(base, opt.fewer_devices))
  for (const auto& p : precisions)
    for (int64_t mb : micro_batches(base.batch)) {
      if (mb % layout.devices != 0) continue;  // every rank gets the same rows of each micro-batch
      if (mb / layout.devices < bp.min_micro_batch) continue;  // batch norm needs two samples a rank
      RunConfig c = layout;
      c.precision = p;
      if (p != base.precision) c.master_weights = MasterWeights::None;
      if (!precision_policy(p).low_precision_params()) c.stochastic_rounding = false;
      c.micro_batch = mb == base.batch ? 0 : mb;
      c.checkpoint = nn::CheckpointSpec::none();
      for (RunConfig s : state_variants(c))
        for (bool fused : {false, true}) {
          s.fused_step = fused;
          // A fused step over micro-batches runs breadth-first and needs checkpointing: valid
          // here when it would be with some units checkpointed (planned without any, it is
          // refused and skipped).
          RunConfig probe = s;
          if (fused && mb < base.batch) probe.checkpoint = nn::CheckpointSpec::blocks();
          if (!valid(probe)) continue;
          combos.push_back({s, predict_step_cost(s, bp, 0, base).cost() / base_cost});  // relative device-seconds
        }
    }
  std::stable_sort(combos.begin(), combos.end(), [](const Combo& a, const Combo& b) { return a.bound < b.bound; });

  // k units of the checkpoint order, or (selective) the selective mode.
  // offload: with --offload-activations (k > 0).
  auto plan = [&](const RunConfig& c, size_t k, bool selective = false, bool offload = false) -> FitCandidate& {
    const CheckpointProfile& p = profile(c.precision);
    FitCandidate cand;
    cand.config = c;
    cand.config.checkpoint = selective ? nn::CheckpointSpec::selective() : p.spec(k);
    cand.config.offload_activations = offload;
    cand.units = selective ? 0 : std::min(k, p.order.size());
    cand.state = state_of(c);
    if (c.offload != OffloadKind::None && cand.state != "8-bit") cand.state = "f32";  // the host keeps f32 state
    const StepCost sc =
        predict_step_cost(cand.config, p, selective ? selective_recompute_flops(p) : p.recompute_flops(k), base);
    cand.time = sc.seconds() / base_seconds;
    cand.cost = sc.cost() / base_cost;
    cand.recompute_flops = sc.recompute_flops;
    // Seconds added to every rank's step: wall time, and device-seconds for the cost.
    auto add_seconds = [&](double s) {
      cand.time += s / base_seconds;
      cand.cost += s * double(c.devices) / base_cost;
    };
    try {
      // Every rank of a sharded strategy (shards differ by up to a parameter); ddp's ranks hold
      // the same bytes. The largest need is the candidate's; a rank that misses ends the loop.
      const int ranks = c.devices > 1 && c.strategy != StrategyKind::Ddp ? int(c.devices) : 1;
      PlanResult r;
      for (int rank = 0; rank < ranks; ++rank) {
        PlanOptions ro = opt;
        ro.rank = rank;
        PlanResult rr = plan_run(cand.config, ro);
        ++f.plans;
        if (rank == 0 || rr.total_needed() > r.total_needed()) r = std::move(rr), cand.worst_rank = rank;
        if (r.total_needed() > budget) break;
      }
      cand.planned = true;
      cand.peak_allocated = r.peak_allocated;
      cand.peak_reserved = r.peak_reserved;
      cand.total_needed = r.total_needed();
      cand.fits = cand.total_needed <= budget;
      if (offload) {  // the bytes of one micro-batch's units (all held at its forward's end), out and back
        const double moved = 2.0 * double(r.pinned_host.category[size_t(Category::Activation)].peak) *
                             double(c.batch / mb_of(c));
        add_seconds(moved / kOffloadBytesPerSecond);
      }
      if (c.offload != OffloadKind::None) add_seconds(offload_seconds(c, r));
    } catch (const UsageError& e) {
      cand.skipped = "refused: " + std::string(e.why());
    }
    f.candidates.push_back(std::move(cand));
    return f.candidates.back();
  };

  // The leanest combinations of a precision (micro-batch 1, leanest state, or fused; everything
  // checkpointed) are planned once, when a combination of that
  // precision first fails with nothing checkpointed: those that do not fit rule out every
  // combination at least as heavy.
  std::vector<RunConfig> hopeless;
  std::vector<RunConfig> checked;  // precision and layout (devices, strategy) checked
  auto check_precision = [&](const RunConfig& g) {
    auto same_group = [&](const RunConfig& o) { return o.precision == g.precision && same_layout(o, g); };
    if (std::any_of(checked.begin(), checked.end(), same_group)) return;
    checked.push_back(g);
    for (const Combo& c : combos) {  // the minimal combinations: none other is leaner
      if (!same_group(c.cfg)) continue;
      const bool minimal = std::none_of(combos.begin(), combos.end(), [&](const Combo& o) {
        return &o != &c && leaner_or_equal(o.cfg, c.cfg) && !leaner_or_equal(c.cfg, o.cfg);
      });
      if (!minimal) continue;
      const size_t n = profile(g.precision).order.size();
      FitCandidate& k = plan(c.cfg, n);
      if (!k.planned || k.fits) continue;
      if (n > 0) {  // offloading is leaner still
        FitCandidate& o = plan(c.cfg, n, false, true);
        if (!o.planned || o.fits) continue;
      }
      hopeless.push_back(c.cfg);
    }
  };

  double best = std::numeric_limits<double>::infinity();
  for (const Combo& combo : combos) {
    if (combo.bound >= best) break;
    if (std::any_of(hopeless.begin(), hopeless.end(), [&](const RunConfig& h) { return leaner_or_equal(h, combo.cfg); }))
      continue;
    const CheckpointProfile& p = profile(combo.cfg.precision);
    const size_t n = p.order.size();
    auto cost_at = [&](size_t k) {
      RunConfig c = combo.cfg;
      c.checkpoint = k ? nn::CheckpointSpec::blocks() : nn::CheckpointSpec::none();  // the cost model asks only whether
      return predict_step_cost(c, p, p.recompute_flops(k), base).cost() / base_cost;
    };
    auto fits_at = [&](size_t k) -> std::pair<bool, int> {
      // Already planned (the leanest-combination check)?
      for (size_t i = 0; i < f.candidates.size(); ++i) {
        const FitCandidate& c = f.candidates[i];
        if (c.planned && c.units == k && c.config.checkpoint.mode != nn::CheckpointSpec::Mode::Selective && !c.config.offload_activations &&
            same_knobs(c.config, combo.cfg))
          return {c.fits, int(i)};
      }
      FitCandidate& c = plan(combo.cfg, k);
      return {c.planned && c.fits, int(f.candidates.size() - 1)};
    };
    size_t kmax = n;
    while (kmax > 0 && cost_at(kmax) >= best) --kmax;
    if (cost_at(0) >= best) continue;
    auto [fit0, i0] = fits_at(0);
    if (fit0) {
      best = f.candidates[size_t(i0)].cost, f.chosen = i0;
      continue;
    }
    check_precision(combo.cfg);
    if (std::any_of(hopeless.begin(), hopeless.end(), [&](const RunConfig& h) { return leaner_or_equal(h, combo.cfg); }))
      continue;
    if (!p.blocks.empty()) {  // selective: a candidate of its own, not a prefix of the order
      RunConfig c = combo.cfg;
      c.checkpoint = nn::CheckpointSpec::selective();
      if (predict_step_cost(c, p, selective_recompute_flops(p), base).cost() / base_cost < best) {
        FitCandidate& sel = plan(combo.cfg, 0, true);
        if (sel.planned && sel.fits) {
          best = sel.cost, f.chosen = int(f.candidates.size() - 1);
          while (kmax > 0 && cost_at(kmax) >= best) --kmax;  // only prefixes cheaper than it
        }
      }
    }
    if (kmax == 0) continue;
    auto [fitk, ik] = fits_at(kmax);
    if (!fitk) {
      if (kmax != n) continue;
      // Everything checkpointed does not fit: offload what the units keep (planned already by the
      // leanest-combination check when this is a minimal combination).
      int io = -1;
      for (size_t i = 0; i < f.candidates.size(); ++i) {
        const FitCandidate& c = f.candidates[i];
        if (c.planned && c.config.offload_activations && c.units == n && same_knobs(c.config, combo.cfg)) io = int(i);
      }
      if (io < 0) {
        plan(combo.cfg, n, false, true);
        io = int(f.candidates.size() - 1);
      }
      const FitCandidate& o = f.candidates[size_t(io)];
      if (o.planned && !o.fits) hopeless.push_back(combo.cfg);  // refused is not "does not fit"
      else if (!o.planned) continue;
      else if (o.cost < best) best = o.cost, f.chosen = io;
      continue;
    }
    size_t lo = 0, hi = kmax;
    int hi_index = ik;
    while (hi - lo > 1) {
      const size_t mid = lo + (hi - lo) / 2;
      auto [fm, im] = fits_at(mid);
      if (fm) hi = mid, hi_index = im;
      else lo = mid;
    }
    best = f.candidates[size_t(hi_index)].cost, f.chosen = hi_index;
  }

  // Nothing fits on the device: the optimizer state to the host, then the block weights too. Per
  // mode, the cheapest combinations (as ordered above; the user's optimizer, f32 or 8-bit state,
  // no fused step) until one fits, at most kOffloadTries plans each.
  if (f.chosen < 0) {
    constexpr int kOffloadTries = 8;
    for (OffloadKind mode : {OffloadKind::Optimizer, OffloadKind::Params}) {
      int tries = 0;
      for (const Combo& combo : combos) {
        if (tries >= kOffloadTries) break;
        RunConfig c = combo.cfg;
        if (c.fused_step || c.optimizer != base.optimizer || c.state_dtype == StateDtype::Bf16) continue;
        c.offload = mode;
        c.master_weights = MasterWeights::None;
        const size_t n = profile(c.precision).order.size();
        if (c.offload == OffloadKind::Params && n == 0) continue;
        c.checkpoint = profile(c.precision).spec(n);
        if (!valid(c)) continue;
        ++tries;
        FitCandidate& k = plan(c, n);
        if (k.planned && k.fits && (f.chosen < 0 || k.cost < f.candidates[size_t(f.chosen)].cost)) {
          f.chosen = int(f.candidates.size() - 1);
          break;
        }
      }
    }
  }

  // Pareto: no other planned candidate is both cheaper (or equal) and smaller (or equal), one strictly.
  for (auto& a : f.candidates) {
    if (!a.planned) continue;
    a.pareto = std::none_of(f.candidates.begin(), f.candidates.end(), [&](const FitCandidate& b) {
      return b.planned && b.cost <= a.cost && b.total_needed <= a.total_needed &&
             (b.cost < a.cost || b.total_needed < a.total_needed);
    });
  }
  f.profile = f.chosen >= 0 ? profile(f.candidates[size_t(f.chosen)].config.precision) : bp;
  f.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (f.chosen < 0) {
    const FitCandidate* best_k = nullptr;
    for (auto& k : f.candidates)
      if (k.planned && (!best_k || k.total_needed < best_k->total_needed)) best_k = &k;
    // A need just over the budget rounds to the same figure ("fits in 34.00 MiB ... needs 34.00 MiB"):
    // then both are given in bytes too, so the message shows by how much it missed.
    std::string have = format_bytes(budget), need = best_k ? format_bytes(best_k->total_needed) : "unknown";
    if (best_k && have == need) {
      have += " (" + std::to_string(budget) + " B)";
      need += " (" + std::to_string(best_k->total_needed) + " B)";
    }
    if (best_k) need += " (" + describe(*best_k) + ")";
    fail("no configuration fits in " + have, "the closest candidate needs " + need + ", context included",
         "raise --budget, shrink --batch or --seq-len, or use a smaller model");
  }
  return f;
}

std::string fit_table(const FitResult& f) {
  std::vector<size_t> idx;
  for (size_t i = 0; i < f.candidates.size(); ++i)
    if (f.candidates[i].planned) idx.push_back(i);
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return f.candidates[a].cost < f.candidates[b].cost; });
  char buf[400];
  // Several devices searched: a layout column, costs in device-seconds and needs per rank.
  const bool multi = std::any_of(idx.begin(), idx.end(), [&](size_t i) { return f.candidates[i].config.devices > 1; });
  const std::string planned = multi ? std::to_string(idx.size()) + " candidates planned (" + std::to_string(f.plans) +
                                          " dry runs: every rank under zero1, zero2, fsdp)"
                                    : std::to_string(f.plans) + " candidates planned";
  std::snprintf(buf, sizeof buf,
                "%s in %.1fs, cheapest first (time: predicted step time relative to the given config;\n"
                "cost: time + the penalty of a leaner optimizer state%s; need: peak reserved + context%s; *: Pareto front)\n",
                planned.c_str(), f.seconds,
                multi ? ", times the GPUs (device-seconds)" : "", multi ? " (+ NCCL), of the largest rank" : "");
  std::string s = buf;
  std::string layout_head;
  if (multi) {
    std::snprintf(buf, sizeof buf, "%-14s ", "gpus/strategy");
    layout_head = buf;
  }
  std::snprintf(buf, sizeof buf, "  %s%-10s %5s %-6s %-10s %-14s %-5s %11s %11s %11s %-4s %6s %6s %11s\n", layout_head.c_str(),
                "precision", "mb", "state", "optimizer", "checkpoint", "fused", "allocated", "reserved", "need", "fits", "time",
                "cost", "recompute");
  s += buf;
  for (size_t i : idx) {
    const FitCandidate& k = f.candidates[i];
    char flops[32];
    const double rf = k.recompute_flops;
    if (rf >= 1e12) std::snprintf(flops, sizeof flops, "%.3g TFLOP", rf / 1e12);
    else if (rf >= 1e9) std::snprintf(flops, sizeof flops, "%.3g GFLOP", rf / 1e9);
    else if (rf > 0) std::snprintf(flops, sizeof flops, "%.3g MFLOP", rf / 1e6);
    else std::snprintf(flops, sizeof flops, "0");
    std::string layout;
    if (multi) {
      const std::string l = k.config.devices < 2 ? "1" : std::to_string(k.config.devices) + " " + strategy_label(k.config);
      std::snprintf(buf, sizeof buf, "%-14s ", l.c_str());
      layout = buf;
    }
    std::snprintf(buf, sizeof buf, "%c %s%-10s %5lld %-6s %-10s %-14s %-5s %11s %11s %11s %-4s %6.3f %6.3f %11s%s\n",
                  k.pareto ? '*' : ' ', layout.c_str(), name_of(k.config.precision).c_str(), (long long)mb_of(k.config), k.state.c_str(),
                  name_of(k.config.optimizer).c_str(), ckpt_label(k, nullptr).c_str(), k.config.fused_step ? "yes" : "no",
                  format_bytes(k.peak_allocated).c_str(), format_bytes(k.peak_reserved).c_str(),
                  format_bytes(k.total_needed).c_str(), k.fits ? "yes" : "no", k.time, k.cost, flops,
                  int(i) == f.chosen ? "  <- chosen" : "");
    s += buf;
  }
  if (std::any_of(idx.begin(), idx.end(), [&](size_t i) { return f.candidates[i].config.offload != OffloadKind::None; })) {
    std::snprintf(buf, sizeof buf,
                  "+host-opt / +host-params: --offload optimizer / params; their time adds the host step at %.0f GB/s and\n"
                  "PCIe copies at %.0f GB/s each way (measured on an H100 machine with 16 host cores, bench/results/offload-h100-b1f1975.md)\n",
                  kHostStepBytesPerSecond / 1e9, kOffloadPcieBytesPerSecond / 1e9);
    s += buf;
  }
  const CheckpointProfile& p = f.profile;
  if (!p.order.empty()) {
    s += "checkpoint order (" + name_of(p.precision) + ", per sample: activation bytes saved / recompute FLOPs; " +
         std::to_string(p.order.size()) + " units, " + std::to_string(p.measurements) + " meta forwards):";
    const std::string* last = nullptr;
    int shown = 0;
    for (const CheckpointUnit& u : p.order) {
      if (last && u.rel == *last) continue;  // the same module in the next block: one entry per kind
      last = &u.rel;
      if (shown++ == 6) {
        s += " ...";
        break;
      }
      std::snprintf(buf, sizeof buf, "%s %s (%s) %s / %.3g MFLOP", shown > 1 ? "," : "", u.rel.empty() ? "block" : u.rel.c_str(),
                    u.type.c_str(), format_bytes(u.saved_bytes).c_str(), u.flops / 1e6);
      s += buf;
    }
    s += "\n";
  }
  return s;
}

std::string fit_json(const FitResult& f) {
  std::string s = "\"candidates\": [";
  bool first = true;
  char buf[200];
  for (size_t i = 0; i < f.candidates.size(); ++i) {
    const FitCandidate& k = f.candidates[i];
    if (!k.planned) continue;
    s += first ? "{" : ", {";
    first = false;
    s += "\"devices\": " + std::to_string(k.config.devices) + ", \"strategy\": " +
         json_str(k.config.devices > 1 ? name_of(k.config.strategy) : "none") +
         ", \"reshard_after_forward\": " + (k.config.reshard_after_forward ? "true" : "false") +
         ", \"worst_rank\": " + std::to_string(k.worst_rank) + ", ";
    s += "\"precision\": " + json_str(name_of(k.config.precision)) + ", \"micro_batch\": " + std::to_string(mb_of(k.config)) +
         ", \"state\": " + json_str(k.state) + ", \"optimizer\": " + json_str(name_of(k.config.optimizer)) +
         ", \"state_dtype\": " + json_str(name_of(k.config.state_dtype)) + ", \"fused_step\": " + (k.config.fused_step ? "true" : "false") +
         ", \"checkpoint\": " + json_str(k.config.checkpoint.text) + ", \"checkpoint_units\": " + std::to_string(k.units) +
         ", \"offload_activations\": " + (k.config.offload_activations ? "true" : "false") +
         ", \"offload\": " + json_str(name_of(k.config.offload)) +
         ", \"peak_allocated_bytes\": " + std::to_string(k.peak_allocated) + ", \"peak_reserved_bytes\": " +
         std::to_string(k.peak_reserved) + ", \"total_needed_bytes\": " + std::to_string(k.total_needed) +
         ", \"fits\": " + (k.fits ? "true" : "false") + ", \"pareto\": " + (k.pareto ? "true" : "false") +
         ", \"chosen\": " + (int(i) == f.chosen ? "true" : "false");
    std::snprintf(buf, sizeof buf, ", \"relative_time\": %.5f, \"relative_cost\": %.5f, \"recompute_flops\": %.6g}", k.time, k.cost,
                  k.recompute_flops);
    s += buf;
  }
  s += "], \"checkpoint_order\": [";
  for (size_t i = 0; i < f.profile.order.size(); ++i) {
    const CheckpointUnit& u = f.profile.order[i];
    std::snprintf(buf, sizeof buf, "\"saved_bytes\": %lld, \"flops\": %.6g}", (long long)u.saved_bytes, u.flops);
    s += (i ? ", {" : "{") + std::string("\"path\": ") + json_str(u.path) + ", \"type\": " + json_str(u.type) + ", " + buf;
  }
  std::snprintf(buf, sizeof buf, "], \"plans\": %d, \"search_seconds\": %.3f", f.plans, f.seconds);
  return s + buf;
}

}  // namespace lt
