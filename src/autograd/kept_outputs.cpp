#include "autograd/kept_outputs.h"

#include "leantrain/error.h"

namespace lt::detail {

namespace {
thread_local KeptOutputs* g_active = nullptr;
}

KeptOutputs* active_kept_outputs() { return g_active; }

KeptOutputsScope::KeptOutputsScope(KeptOutputs* k) : prev_(g_active) { g_active = k; }
KeptOutputsScope::~KeptOutputsScope() { g_active = prev_; }

std::vector<Tensor> take_kept_outputs(const char* op, const std::vector<Shape>& shapes,
                                      const std::vector<DType>& dtypes) {
  KeptOutputs* k = g_active;
  if (!k || !k->replay) return {};
  const std::string fix = "checkpoint with --checkpoint blocks instead, or make the region's forward deterministic";
  LT_CHECK(k->next < k->entries.size(),
           std::string("selective checkpointing: the recomputation called ") + op + " more often than the forward (" +
               std::to_string(k->entries.size()) + " matmul-class calls)",
           "the region's forward took a different path the second time", fix);
  const size_t i = k->next++;
  const std::vector<SavedTensor>& e = k->entries[i];
  bool same = k->ops[i] == op && e.size() == shapes.size();
  for (size_t j = 0; same && j < e.size(); ++j) same = e[j].shape() == shapes[j] && e[j].dtype() == dtypes[j];
  LT_CHECK(same,
           std::string("selective checkpointing: call ") + std::to_string(i + 1) + " of the recomputation is " + op +
               " " + (shapes.empty() ? std::string("()") : shape_str(shapes[0])),
           "the forward's call " + std::to_string(i + 1) + " was " + k->ops[i] + " " +
               (e.empty() ? std::string("()") : shape_str(e[0].shape())) + "; the region's forward is not deterministic",
           fix);
  std::vector<Tensor> out;
  out.reserve(e.size());
  // Fresh handles: the op records its node on them, and the kept tensors must not hold that
  // node (and through it the recomputed inputs) after the recomputation's backward.
  for (const SavedTensor& t : e) out.push_back(t.unpack().detach());
  return out;
}

void keep_outputs(const char* op, const std::vector<Tensor>& results) {
  KeptOutputs* k = g_active;
  if (!k || k->replay) return;
  std::vector<SavedTensor> e;
  e.reserve(results.size());
  for (const Tensor& t : results) e.emplace_back(t.detach());
  k->entries.push_back(std::move(e));
  k->ops.push_back(op);
}

Tensor kept_or_empty(const char* op, const Shape& shape, DType dtype, Device device, bool& fresh) {
  std::vector<Tensor> kept = take_kept_outputs(op, {shape}, {dtype});
  fresh = kept.empty();
  return fresh ? Tensor::empty(shape, dtype, device) : kept[0];
}

}  // namespace lt::detail
