// maximize_fit: the longest --seq-len or the largest --batch whose plan fits a budget, every other
// flag as given. The criterion is fit_budget's: total needed (peak reserved + context) <= budget.
// The need grows with the value, so: grow by doubling from a start until a plan misses (or the
// model refuses the value, e.g. past its positions), then bisect between the last fit and the
// first miss, at most kMaxPlans dry runs in all.
#include <chrono>
#include <string>

#include "leantrain/error.h"
#include "leantrain/plan.h"

namespace lt {

namespace {

constexpr int kMaxPlans = 24;

RunConfig with_value(RunConfig c, const std::string& what, int64_t v) {
  if (what == "seq-len") c.seq_len = v;
  else c.batch = v, c.micro_batch = 0;  // the whole batch in one micro-batch
  return c;
}

}  // namespace

MaximizeResult maximize_fit(const RunConfig& base, const std::string& what, int64_t budget, const PlanOptions& opt) {
  if (what != "seq-len" && what != "batch")
    throw UsageError("--maximize " + what, "it can only grow seq-len or batch", "pass --maximize seq-len or --maximize batch");
  const auto t0 = std::chrono::steady_clock::now();
  MaximizeResult m;
  m.what = what;
  m.budget = budget;
  // One dry run; false when it misses the budget or the model refuses the value.
  // The flags as given first: their own errors (a bad model, flag), not the search's.
  if (what == "seq-len" || base.batch > 1) {
    ++m.plans;
    plan_run(base, opt);
  }
  auto fits = [&](int64_t v, bool first) -> bool {
    ++m.plans;
    try {
      PlanResult r = plan_run(with_value(base, what, v), opt);
      if (r.total_needed() <= budget) {
        m.value = v, m.result = r;
        return true;
      }
      if (first) m.smallest_need = r.total_needed();
      else if (m.first_miss == 0 || v < m.first_miss) m.first_miss = v;
      return false;
    } catch (const UsageError& e) {
      if (first) {
        if (what == "seq-len")
          throw UsageError("--maximize seq-len", std::string("the model's sequence length cannot change: ") + e.why(),
                           "use --maximize batch");
        throw;
      }
      m.refused = v, m.refused_why = e.why();
      return false;
    }
  };
  if (!fits(1, true)) {
    fail("--maximize " + what + " under --budget " + format_bytes(budget),
         "even " + what + " 1 needs " + format_bytes(m.smallest_need) + ", " +
             format_bytes(m.smallest_need - budget) + " over the budget, context included",
         "raise --budget, or shrink the model or the other flags (--checkpoint, --quantize, --offload-activations)");
  }
  // Grow: from the given value (or 1024 tokens / 1 sample) by doubling.
  int64_t lo = 1, hi = 0;  // lo fits; hi (when set) does not
  int64_t start = what == "seq-len" ? (base.seq_len > 1 ? base.seq_len : 1024) : (base.batch > 1 ? base.batch : 2);
  for (int64_t v = start; m.plans < kMaxPlans; v *= 2) {
    if (fits(v, false)) lo = v;
    else {
      hi = v;
      break;
    }
  }
  if (hi == 0) m.capped = true;
  while (hi != 0 && hi - lo > 1 && m.plans < kMaxPlans) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (fits(mid, false)) lo = mid;
    else hi = mid;
  }
  m.value = lo;
  m.exact = hi != 0 && hi - lo <= 1;
  m.next = hi;
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

std::string maximize_line(const MaximizeResult& m) {
  std::string s = "largest " + m.what + " that fits " + format_bytes(m.budget) + ": " + std::to_string(m.value) + " (needs " +
                  format_bytes(m.result.total_needed()) + ", peak reserved + context; " + std::to_string(m.plans) + " dry runs";
  if (m.exact) s += "; " + m.what + " " + std::to_string(m.next) + (m.refused == m.next ? " is refused: " + m.refused_why : " does not fit");
  else if (m.next) s += "; between " + std::to_string(m.value) + " and " + std::to_string(m.next) + ", the run cap reached";
  else s += "; the run cap reached still growing";
  return s + ")";
}

}  // namespace lt
