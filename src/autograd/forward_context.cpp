#include "autograd/forward_context.h"

namespace lt {

namespace {
thread_local ForwardContext t_context;
thread_local const void* t_pending_model = nullptr;
thread_local std::shared_ptr<MoeAuxLoss> t_pending;
}  // namespace

void set_pending_moe_aux(const void* model, std::shared_ptr<MoeAuxLoss> aux) {
  t_pending_model = model;
  t_pending = std::move(aux);
}

std::shared_ptr<MoeAuxLoss> take_pending_moe_aux(const void* model) {
  if (model != t_pending_model) return nullptr;
  t_pending_model = nullptr;
  return std::move(t_pending);
}

const ForwardContext& forward_context() { return t_context; }

ForwardContextScope::ForwardContextScope(ForwardContext c) : prev_(std::move(t_context)) { t_context = std::move(c); }
ForwardContextScope::~ForwardContextScope() { t_context = std::move(prev_); }

}  // namespace lt
