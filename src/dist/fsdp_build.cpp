// The sharded build (fsdp_build.h).
#include "dist/fsdp_build.h"

#include <set>

#include "dist/data_parallel.h"
#include "dist/fsdp_units.h"
#include "leantrain/autograd.h"
#include "leantrain/memory.h"

namespace lt::dist {

bool builds_sharded(const RunConfig& c) {
  return c.strategy == StrategyKind::Fsdp && world().size() > 1 && c.lora_rank == 0 && c.offload != OffloadKind::Params;
}

void materialize_rank_share(const RunConfig& c, models::Model& model, const std::vector<nn::DeferredSlot>& slots,
                            bool fill) {
  std::vector<Tensor> params;
  for (auto& [n, p] : model.named_trainable_parameters()) params.push_back(p);
  const std::vector<int> owner = owners_for(c, model, params, world().size());
  std::set<const TensorImpl*> in_unit;
  for (nn::Module* m : fsdp_unit_modules(model))
    for (auto& [n, p] : m->named_parameters()) in_unit.insert(p.impl());
  std::set<const TensorImpl*> elsewhere;  // the units' parameters another rank owns
  for (size_t i = 0; i < params.size(); ++i)
    if (in_unit.count(params[i].impl()) && owner[i] != world().rank()) elsewhere.insert(params[i].impl());
  MemoryCategoryScope category(Category::Parameter);
  NoGradGuard no_grad;
  for (const nn::DeferredSlot& s : slots) {
    TensorImpl& t = *s.tensor.impl();
    if (!s.buffer && elsewhere.count(&t)) continue;
    const Tensor own = Tensor::empty(t.shape, t.dtype, t.device);
    t.storage = own.impl()->storage;
    t.offset = 0;
    t.strides = own.strides();
    if (fill || s.buffer) nn::fill_slot(s.tensor, s);
  }
}

}  // namespace lt::dist
