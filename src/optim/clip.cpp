// Gradient clipping by global norm without touching the gradients: the norm comes from the
// backend's sum_squares (one call per device), and the clip coefficient is handed to the
// optimizer as grad_scale, which multiplies each gradient inside the update.
#include <algorithm>
#include <cmath>

#include "backend/backend.h"
#include "leantrain/error.h"
#include "leantrain/ops.h"
#include "leantrain/optim.h"

namespace lt {

bool GradNorm::finite() const { return std::isfinite(norm); }

GradNorm clip_grad_norm(const std::vector<Tensor>& params, double max_norm, float pre_scale) {
  // Grads by device, in the order devices first appear (deterministic allocation order).
  std::vector<std::pair<Device, std::vector<Tensor>>> by_device;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    LT_CHECK(g.is_contiguous(), "clip_grad_norm: a gradient is not contiguous", "sum_squares reads it linearly",
             "store contiguous gradients");
    auto it = std::find_if(by_device.begin(), by_device.end(), [&](auto& e) { return e.first == g.device(); });
    if (it == by_device.end()) it = by_device.insert(by_device.end(), {g.device(), {}});
    it->second.push_back(g);
  }
  double sum = 0;
  for (auto& [dev, grads] : by_device) {
    // f64 accumulator where every grad is f64 on the CPU (exact tests), f32 [1] otherwise.
    bool all_f64 = dev.is_cpu() && std::all_of(grads.begin(), grads.end(), [](auto& g) { return g.dtype() == DType::F64; });
    Tensor acc;
    {
      MemoryCategoryScope s(Category::Workspace);
      acc = zeros({1}, all_f64 ? DType::F64 : DType::F32, dev);
    }
    backend_for(dev).sum_squares(acc, grads);
    if (!dev.is_meta()) sum += acc.item();
  }
  return grad_norm_from_sum_squares(sum, max_norm, pre_scale);
}

GradNorm grad_norm_from_sum_squares(double sum_squares, double max_norm, float pre_scale) {
  GradNorm r;
  r.norm = std::sqrt(sum_squares) * double(pre_scale);
  if (!r.finite()) {
    // Callers skip the step (loss scaler) or stop; stepping anyway poisons the weights, as in PyTorch.
    r.clip_coef = r.grad_scale = std::nanf("");
    return r;
  }
  if (max_norm > 0) r.clip_coef = float(std::min(1.0, max_norm / (r.norm + 1e-6)));
  r.grad_scale = pre_scale * r.clip_coef;
  return r;
}

}  // namespace lt
