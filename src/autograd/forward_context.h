// State a model sets for one forward (one micro-batch) that layers deep inside it read: the
// mixture-of-experts load-balancing loss the routers add their sums to. checkpoint() takes the
// context current at a region's forward and makes it current again while the region is
// recomputed in the backward, so a recomputed router joins the forward it belongs to even when
// the backward runs several micro-batches breadth-first.
#pragma once
#include <memory>

namespace lt {

struct MoeAuxLoss;  // leantrain/ops.h

struct ForwardContext {
  std::shared_ptr<MoeAuxLoss> moe_aux;
};

// This thread's current context (empty outside any scope).
const ForwardContext& forward_context();

// Makes `c` current until the scope ends (scopes nest).
class ForwardContextScope {
 public:
  explicit ForwardContextScope(ForwardContext c);
  ~ForwardContextScope();
  ForwardContextScope(const ForwardContextScope&) = delete;
  ForwardContextScope& operator=(const ForwardContextScope&) = delete;

 private:
  ForwardContext prev_;
};

// The load-balancing loss of the last forward `model` ran on this thread, left for that model's
// loss() to add (models::Model::loss, which has no per-family hook); taking it clears it.
void set_pending_moe_aux(const void* model, std::shared_ptr<MoeAuxLoss> aux);
std::shared_ptr<MoeAuxLoss> take_pending_moe_aux(const void* model);

}  // namespace lt
