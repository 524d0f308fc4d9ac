#include "train/finite_state.h"

#include <cmath>

#include "io/text_format.h"
#include "leantrain/autograd.h"
#include "leantrain/memory.h"

namespace lt {

namespace {

// The tensor's values on the host, one at a time; `visit` returns false to stop.
template <class F>
void for_each_value(const Tensor& t, F&& visit) {
  // No storage: another rank's parameter (fsdp's sharded build); that rank checks it.
  if (!t.defined() || !is_floating(t.dtype()) || t.numel() == 0 || t.device().is_meta() || !t.storage()) return;
  NoGradGuard no_grad;
  MemoryCategoryScope other(Category::Other);  // a host copy for the check, not part of the run
  if (t.dtype() == DType::F64) {
    const std::vector<double> v = t.to_double_vector();
    for (size_t i = 0; i < v.size(); ++i)
      if (!visit(v[i], i)) return;
  } else {
    const std::vector<float> v = t.to_float_vector();
    for (size_t i = 0; i < v.size(); ++i)
      if (!visit(double(v[i]), i)) return;
  }
}

std::string describe(double v) { return std::isnan(v) ? "NaN" : v > 0 ? "inf" : "-inf"; }

}  // namespace

std::string first_nonfinite(const Tensor& t) {
  std::string found;
  for_each_value(t, [&](double v, size_t i) {
    if (std::isfinite(v)) return true;
    found = describe(v) + " at element " + std::to_string(i);
    return false;
  });
  return found;
}

std::string nonfinite_weight(const models::Model& m, const std::map<const TensorImpl*, Tensor>& stand_ins) {
  for (const auto& [name, p] : m.named_parameters()) {
    auto it = stand_ins.find(p.impl());
    if (std::string bad = first_nonfinite(it != stand_ins.end() ? it->second : p); !bad.empty())
      return "weight '" + name + "' holds " + bad;
  }
  return "";
}

std::string bad_optimizer_state(const std::map<std::string, Tensor>& state) {
  for (const auto& [name, t] : state) {
    const bool non_negative = name.ends_with(".exp_avg_sq") || name.ends_with("_absmax");
    std::string found;
    for_each_value(t, [&](double v, size_t i) {
      if (std::isfinite(v) && !(non_negative && v < 0)) return true;
      found = std::isfinite(v) ? short_number(v) + " at element " + std::to_string(i) + ", where only values >= 0 are valid"
                               : describe(v) + " at element " + std::to_string(i);
      return false;
    });
    if (!found.empty()) return "optimizer state '" + name + "' holds " + found;
  }
  return "";
}

}  // namespace lt
