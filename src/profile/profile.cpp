// profile_run: one short run per candidate, each built afresh with only that module
// checkpointed (as `train --checkpoint '<its path>'` would), first on meta for the prediction,
// then on the device for the measurement. Both passes make the same runs in the same order
// with one allocator each, so what stays allocated between runs (the cuBLASLt workspace on
// cuda) is the same in both and the peaks agree to the byte.
#include "profile/profile.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <regex>

#include "backend/backend.h"
#include "leantrain/checkpoint.h"
#include "leantrain/nn.h"
#include "memory/host_allocators.h"
#include "train/recipe_table.h"
#include "train/assemble.h"
#include "train/task.h"
#include "train/trainer.h"

namespace lt {

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxSubsetModules = 6;

struct Candidate {
  std::string module, kind, checkpoint;
};

struct Measured {
  int64_t peak = 0, act_peak = 0;
  std::vector<double> step_ms;
  int64_t items = 0;  // per step
};

// One run: a fresh task on `device` with `checkpoint` applied, W + K steps. Timed steps are
// bracketed by device synchronisations; the peak covers the build and every step. `held`: bytes
// (all, activation) the device held before the profile began, owned by someone else (an embedding
// program, an earlier test); they are not the run's, and meta never sees them.
Measured run_one(const RunConfig& base, const std::string& checkpoint, Device device, const ProfileOptions& o,
                 bool timed, std::pair<int64_t, int64_t> held = {0, 0}) {
  RunConfig cfg = base;
  cfg.checkpoint = parse_checkpoint_flag(checkpoint);  // a regex the profile built, or "none"
  Allocator& al = allocator_for(device);
  al.reset_peak_stats();
  Measured m;
  {
    AssembledRun run = assemble_run(cfg, device, {.strategy = false});
    Trainer& trainer = *run.trainer;
    trainer.start();
    Backend* be = timed ? &backend_for(device) : nullptr;
    for (int64_t i = 0; i < o.warmup_steps + o.timed_steps; ++i) {
      if (be) be->synchronize();
      auto t0 = Clock::now();
      StepOutcome s = trainer.step();
      if (be) be->synchronize();
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      if (i >= o.warmup_steps) m.step_ms.push_back(ms), m.items = s.items;
    }
  }
  const MemoryStats st = al.stats();
  m.peak = st.allocated_bytes.peak - held.first;
  m.act_peak = st.category[size_t(Category::Activation)].peak - held.second;
  return m;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

bool ProfileResult::drifted() const {
  const double lo = std::min(baseline_first_ms, baseline_last_ms), hi = std::max(baseline_first_ms, baseline_last_ms);
  return lo > 0 && hi > 1.1 * lo;
}

double ProfileRow::bytes_per_ms() const {
  return ms_added > 0 ? double(saved_measured) / ms_added : std::numeric_limits<double>::quiet_NaN();
}

std::vector<std::string> profile_modules(const RunConfig& cfg_in, const std::string& spec) {
  RunConfig cfg = cfg_in;
  cfg.checkpoint = nn::CheckpointSpec::none();
  // The module tree only: build the model on meta (no memory, no compute).
  MetaAllocatorScope meta(false);
  std::unique_ptr<Task> task = make_task(cfg, Device::meta());
  nn::Module& root = *task->model;
  auto modules = root.named_modules();
  std::vector<std::string> out;
  if (spec == "blocks" || spec == "sublayers") {
    for (auto& [path, m] : modules) {
      if (!nn::is_transformer_block(*m)) continue;
      out.push_back(path);
      if (spec == "blocks") continue;
      for (const std::string& name : nn::block_sublayers(*m)) out.push_back(path + "." + name);  // attention, MLP
    }
    if (out.empty())
      throw UsageError("nothing to profile: this " + std::string(root.type_name()) + " has no transformer blocks",
                       "--modules " + spec + " profiles checkpointing of blocks and their attention and MLP",
                       "pass --modules with a regular expression over module paths, or a model with blocks");
    return out;
  }
  std::regex re;
  try {
    re = std::regex(spec);
  } catch (const std::regex_error& e) {
    throw UsageError("--modules '" + spec + "' is not a valid regular expression", e.what(),
                     "pass blocks, sublayers, or an expression such as 'transformer\\.h\\.[0-3]'");
  }
  std::string examples;
  for (auto& [path, m] : modules) {
    if (!path.empty() && nn::has_wrappable_forward(*m) && examples.size() < 120)
      examples += (examples.empty() ? "" : ", ") + path;
    if (!std::regex_match(path, re)) continue;
    if (!nn::has_wrappable_forward(*m))
      throw UsageError("--modules '" + spec + "' matches " + (path.empty() ? "(root)" : path) + " (a " + m->type_name() + ")",
                       "its forward is not one call that can be recomputed (a model root or a container)",
                       "match the modules inside it instead, e.g. its blocks");
    out.push_back(path);
  }
  if (out.empty())
    throw UsageError("nothing to profile: --modules '" + spec + "' matches no checkpointable module",
                     "the expression must match a whole module path (std::regex_match)",
                     "checkpointable paths look like: " + examples + ", ...");
  return out;
}

std::vector<bool> profile_pareto_front(const std::vector<double>& x, const std::vector<double>& y) {
  std::vector<bool> f(x.size(), false);
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i]) || !std::isfinite(y[i])) continue;
    bool dominated = false;
    for (size_t j = 0; j < x.size() && !dominated; ++j)
      dominated = j != i && std::isfinite(x[j]) && std::isfinite(y[j]) && x[j] >= x[i] && y[j] <= y[i] &&
                  (x[j] > x[i] || y[j] < y[i]);
    f[i] = !dominated;
  }
  return f;
}

int profile_pick(const std::vector<ProfileRow>& rows, double noise_ms) {
  int best = -1;
  double best_ratio = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const ProfileRow& r = rows[i];
    if (!r.pareto || r.saved_measured <= 0) continue;
    const double ratio = double(r.saved_measured) / std::max(r.ms_added, std::max(noise_ms, 1e-9));
    if (best < 0 || ratio > best_ratio) best = int(i), best_ratio = ratio;
  }
  return best;
}

ProfileResult profile_run(const RunConfig& cfg_in, const ProfileOptions& opt,
                          const std::function<void(const std::string&)>& progress) {
  auto t_start = Clock::now();
  if (opt.warmup_steps < 0)
    throw UsageError("--warmup-steps " + std::to_string(opt.warmup_steps), "it counts untimed steps",
                     "pass 0 or more, e.g. --warmup-steps 2");
  if (opt.timed_steps < 1)
    throw UsageError("--timed-steps " + std::to_string(opt.timed_steps), "the step time is the median of the timed steps",
                     "pass 1 or more, e.g. --timed-steps 5");
  RunConfig cfg = cfg_in;
  cfg.steps = opt.warmup_steps + opt.timed_steps;  // the schedule spans what runs
  cfg.checkpoint = nn::CheckpointSpec::none();
  {
    RunConfig v = cfg;
    v.offload_activations = false;  // applies to the runs that checkpoint something (each but the baseline)
    validate(v);
  }
  ProfileResult r;
  r.config = cfg;
  r.options = opt;
  r.device = resolve_device(cfg.device);

  std::vector<Candidate> cands;
  cands.push_back({"(none)", "", "none"});
  bool has_blocks = false;
  {
    std::vector<std::string> paths = profile_modules(cfg, opt.modules);
    MetaAllocatorScope meta(false);
    std::unique_ptr<Task> task = make_task(cfg, Device::meta());
    r.description = task->description;
    r.unit = task->unit;
    if (!opt.subsets) {
      for (const std::string& p : paths)
        cands.push_back({p, task->model->find_module(p)->type_name(), nn::checkpoint_regex_for(p)});
    } else {
      // Seed 004's scatter: every combination (layer1, layer1+layer2, ...), as one regex each.
      if (paths.size() > kMaxSubsetModules)
        throw UsageError("--subsets with " + std::to_string(paths.size()) + " modules matching --modules '" +
                             opt.modules + "'",
                         "it runs every combination: at most " + std::to_string(kMaxSubsetModules) + " modules (" +
                             std::to_string((1 << kMaxSubsetModules) - 1) + " runs)",
                         "narrow --modules, e.g. 'layer[1-4]'");
      for (uint32_t mask = 1; mask < (1u << paths.size()); ++mask) {
        std::string name, regex;
        for (size_t j = 0; j < paths.size(); ++j)
          if (mask & (1u << j)) {
            name += (name.empty() ? "" : "+") + paths[j];
            regex += (regex.empty() ? "(" : "|(") + nn::checkpoint_regex_for(paths[j]) + ")";
          }
        cands.push_back({name, std::popcount(mask) == 1 ? task->model->find_module(name)->type_name() : "subset", regex});
      }
    }
    for (auto& [path, m] : task->model->named_modules()) has_blocks = has_blocks || nn::is_transformer_block(*m);
  }
  if (has_blocks) cands.push_back({"all blocks", "blocks", "blocks"});
  r.modules_note = opt.modules == "sublayers" ? "every transformer block, and its attention and its MLP alone"
                   : opt.modules == "blocks"  ? "every transformer block"
                                              : "the modules matching '" + opt.modules + "'";
  if (opt.subsets) r.modules_note = "every combination of " + r.modules_note;

  const size_t n = cands.size();
  std::vector<Measured> predicted(n);
  {  // the prediction: the same runs on meta, with the allocator policy of the target device
    MetaAllocatorScope meta(r.device.is_cuda());
    for (size_t i = 0; i < n; ++i) {
      if (progress) progress("predicting " + std::to_string(i + 1) + "/" + std::to_string(n) + ": " + cands[i].module);
      predicted[i] = run_one(cfg, cands[i].checkpoint, Device::meta(), opt, false);
    }
  }
  std::vector<Measured> measured(n);
  const MemoryStats before = allocator_for(r.device).stats();
  const std::pair<int64_t, int64_t> held{before.allocated_bytes.current,
                                         before.category[size_t(Category::Activation)].current};
  for (size_t i = 0; i < n; ++i) {
    if (progress) progress("measuring " + std::to_string(i + 1) + "/" + std::to_string(n + 1) + " on " + r.device.str() +
                           ": " + cands[i].module);
    measured[i] = run_one(cfg, cands[i].checkpoint, r.device, opt, true, held);
  }
  // The baseline once more, last: its two medians show whether the machine's speed drifted.
  if (progress) progress("measuring " + std::to_string(n + 1) + "/" + std::to_string(n + 1) + " on " + r.device.str() +
                         ": (none) again, for drift");
  const Measured again = run_one(cfg, "none", r.device, opt, true, held);
  r.baseline_first_ms = median(measured[0].step_ms);
  r.baseline_last_ms = median(again.step_ms);
  measured[0].step_ms.insert(measured[0].step_ms.end(), again.step_ms.begin(), again.step_ms.end());

  auto row_of = [&](size_t i) {
    ProfileRow w;
    w.module = cands[i].module;
    w.kind = cands[i].kind;
    w.checkpoint = cands[i].checkpoint;
    w.peak_measured = measured[i].peak;
    w.peak_predicted = predicted[i].peak;
    w.saved_measured = measured[0].peak - measured[i].peak;
    w.saved_predicted = predicted[0].peak - predicted[i].peak;
    w.act_peak_measured = measured[i].act_peak;
    w.act_peak_predicted = predicted[i].act_peak;
    w.act_saved_measured = measured[0].act_peak - measured[i].act_peak;
    w.act_saved_predicted = predicted[0].act_peak - predicted[i].act_peak;
    w.step_ms = measured[i].step_ms;
    w.median_ms = median(w.step_ms);
    w.ms_added = w.median_ms - median(measured[0].step_ms);
    w.items_per_s = w.median_ms > 0 ? double(measured[i].items) / (w.median_ms / 1000) : 0;
    return w;
  };
  r.baseline = row_of(0);
  for (size_t i = 1; i < n; ++i) r.rows.push_back(row_of(i));
  std::vector<double> xs, ys;
  for (const ProfileRow& w : r.rows) xs.push_back(double(w.saved_measured)), ys.push_back(w.ms_added);
  std::vector<bool> f = profile_pareto_front(xs, ys);
  for (size_t i = 0; i < r.rows.size(); ++i) r.rows[i].pareto = f[i];
  r.pick = profile_pick(r.rows, 0.01 * r.baseline.median_ms);
  r.seconds = std::chrono::duration<double>(Clock::now() - t_start).count();
  return r;
}

}  // namespace lt
