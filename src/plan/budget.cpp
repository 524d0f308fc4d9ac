// fit_budget: candidates over precision x micro-batch x checkpointing x fused step, ordered by
// the cost model (cheapest first) and planned on meta in that order; the first that fits wins.
// A candidate is skipped without planning when a candidate that is at least as lean on every
// memory axis (same precision, micro-batch no larger, checkpointing no lighter, fused no less)
// was planned and did not fit, or when validate() refuses the combination.
#include <algorithm>
#include <cstdio>

#include "leantrain/plan.h"

namespace lt {

namespace {

int checkpoint_rank(const std::string& s) {
  if (s == "none" || s.empty()) return 0;
  if (s == "selective") return 1;
  if (s.rfind("every:", 0) == 0) return 2;
  return 3;  // blocks
}

std::vector<int64_t> micro_batches(int64_t batch) {
  std::vector<int64_t> out;
  for (int64_t m = batch; m >= 1; --m)
    if (batch % m == 0) out.push_back(m);
  return out;  // largest first
}

std::vector<RunConfig> enumerate(const RunConfig& base) {
  std::vector<std::string> precisions = {base.precision};
  for (const char* p : {"bf16-mixed", "bf16-true"})
    if (base.precision != p) precisions.push_back(p);
  std::vector<std::string> ckpts = {base.checkpoint.empty() ? "none" : base.checkpoint};
  for (const char* c : {"none", "selective", "every:2", "blocks"})
    if (ckpts[0] != c) ckpts.push_back(c);
  std::vector<RunConfig> out;
  for (const auto& p : precisions)
    for (int64_t mb : micro_batches(base.batch))
      for (const auto& ck : ckpts)
        for (bool fused : {false, true}) {
          RunConfig c = base;
          c.precision = p;
          if (p != base.precision) c.master_weights = "none";
          c.micro_batch = mb == base.batch ? 0 : mb;
          c.checkpoint = ck;
          c.fused_step = fused;
          out.push_back(c);
        }
  return out;
}

bool leaner_or_equal(const RunConfig& a, const RunConfig& b) {  // a uses no more memory than b, axis by axis
  auto mb = [](const RunConfig& c) { return c.micro_batch ? c.micro_batch : c.batch; };
  return a.precision == b.precision && a.master_weights == b.master_weights && mb(a) <= mb(b) &&
         checkpoint_rank(a.checkpoint) >= checkpoint_rank(b.checkpoint) && (a.fused_step || !b.fused_step);
}

std::string describe(const RunConfig& c) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%-10s mb %-4lld ckpt %-9s%s", c.precision.c_str(),
                (long long)(c.micro_batch ? c.micro_batch : c.batch), c.checkpoint.c_str(), c.fused_step ? " fused" : "");
  return buf;
}

}  // namespace

FitResult fit_budget(const RunConfig& base, int64_t budget, const PlanOptions& opt) {
  FitResult f;
  f.budget = budget;
  for (RunConfig& c : enumerate(base)) {
    FitCandidate k;
    k.cost = relative_step_cost(c, base);
    k.config = std::move(c);
    f.candidates.push_back(std::move(k));
  }
  std::stable_sort(f.candidates.begin(), f.candidates.end(),
                   [](const FitCandidate& a, const FitCandidate& b) { return a.cost < b.cost; });
  std::vector<const FitCandidate*> failed;
  for (size_t i = 0; i < f.candidates.size() && f.chosen < 0; ++i) {
    FitCandidate& k = f.candidates[i];
    bool dominated = std::any_of(failed.begin(), failed.end(),
                                 [&](const FitCandidate* y) { return leaner_or_equal(y->config, k.config); });
    if (dominated) {
      k.skipped = "a leaner candidate did not fit";
      continue;
    }
    try {
      PlanResult r = plan_run(k.config, opt);
      k.planned = true;
      k.peak_reserved = r.peak_reserved;
      k.total_needed = r.total_needed();
      k.fits = k.total_needed <= budget;
    } catch (const UsageError& e) {  // a pair that cannot combine (e.g. fused step with accumulation)
      k.skipped = "refused: " + std::string(e.why());
      continue;
    }
    if (k.fits) f.chosen = int(i);
    else failed.push_back(&k);
  }
  // Pareto: no other planned candidate is both cheaper (or equal) and smaller (or equal), one strictly.
  for (auto& a : f.candidates) {
    if (!a.planned) continue;
    a.pareto = std::none_of(f.candidates.begin(), f.candidates.end(), [&](const FitCandidate& b) {
      return b.planned && b.cost <= a.cost && b.total_needed <= a.total_needed &&
             (b.cost < a.cost || b.total_needed < a.total_needed);
    });
  }
  if (f.chosen < 0) {
    const FitCandidate* best = nullptr;
    for (auto& k : f.candidates)
      if (k.planned && (!best || k.total_needed < best->total_needed)) best = &k;
    std::string d = best ? describe(best->config) : "";
    while (!d.empty() && d.back() == ' ') d.pop_back();
    for (size_t p; (p = d.find("  ")) != std::string::npos;) d.erase(p, 1);
    // A need just over the budget rounds to the same figure ("fits in 34.00 MiB ... needs 34.00 MiB"):
    // then both are given in bytes too, so the message shows by how much it missed.
    std::string have = format_bytes(budget), need = best ? format_bytes(best->total_needed) : "unknown";
    if (best && have == need) {
      have += " (" + std::to_string(budget) + " B)";
      need += " (" + std::to_string(best->total_needed) + " B)";
    }
    if (best) need += " (" + d + ")";
    fail("no configuration fits in " + have,
         "the smallest candidate needs " + need + ", context included",
         "raise --budget, shrink --batch or --seq-len, or use a smaller model");
  }
  return f;
}

std::string fit_table(const FitResult& f) {
  std::string s = "candidates, cheapest first (cost: step time relative to the given config; need: peak reserved + context)\n";
  char buf[300];
  std::snprintf(buf, sizeof buf, "  %-42s %7s %12s  %s\n", "precision / micro-batch / checkpoint / step", "cost", "need", "");
  s += buf;
  for (size_t i = 0; i < f.candidates.size(); ++i) {
    const FitCandidate& k = f.candidates[i];
    if (!k.planned) continue;
    std::string mark = int(i) == f.chosen ? "<- chosen" : k.fits ? "fits" : "over budget";
    if (k.pareto) mark += " (pareto)";
    std::snprintf(buf, sizeof buf, "  %-42s %7.3f %12s  %s\n", describe(k.config).c_str(), k.cost,
                  format_bytes(k.total_needed).c_str(), mark.c_str());
    s += buf;
  }
  size_t skipped = size_t(std::count_if(f.candidates.begin(), f.candidates.end(),
                                        [](const FitCandidate& k) { return !k.planned && !k.skipped.empty(); }));
  s += "  (" + std::to_string(skipped) + " candidates skipped: dominated by one that did not fit, or refused combinations)\n";
  return s;
}

}  // namespace lt
