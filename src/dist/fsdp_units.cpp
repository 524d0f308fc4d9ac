// FsdpUnits (fsdp_units.h).
#include "dist/fsdp_units.h"

#include <any>
#include <map>
#include <set>

#include "backend/backend.h"
#include "backend/event.h"
#include "leantrain/autograd.h"
#include "leantrain/checkpoint.h"
#include "leantrain/models.h"
#include "memory/streams.h"

namespace lt::dist {

namespace {

// A saved unit parameter: which one, so unpack can re-gather it.
struct SavedParam {
  size_t index;
};

}  // namespace

std::vector<nn::Module*> fsdp_unit_modules(nn::Module& model) {
  std::set<const nn::Module*> standalone;
  if (auto* lm = dynamic_cast<models::Model*>(&model))
    for (nn::Module* m : lm->standalone_modules()) standalone.insert(m);
  std::vector<nn::Module*> out;
  for (auto& [path, m] : model.named_modules())
    if (nn::is_transformer_block(*m) || standalone.count(m)) out.push_back(m);
  return out;
}

FsdpUnits::FsdpUnits(Communicator& comm, nn::Module& model, const std::vector<Tensor>& params,
                     const std::vector<int>& owner, bool reshard_after_forward, Device device)
    : comm_(comm), device_(device), params_(params), owner_(owner), unit_of_(params.size(), -1),
      reshard_(reshard_after_forward) {
  std::map<const TensorImpl*, size_t> index;
  for (size_t i = 0; i < params_.size(); ++i) index[params_[i].impl()] = i;
  for (nn::Module* m : fsdp_unit_modules(model)) {
    Unit u;
    // A lookup table's backward reads the indices only: prefetching it in backward would gather
    // it for nothing, at the end of backward where the gradients peak.
    u.backward_reads = dynamic_cast<nn::Embedding*>(m) == nullptr;
    u.recomputed = bool(m->forward_wrapper());
    for (auto& [n, p] : m->named_parameters()) {
      auto it = index.find(p.impl());
      if (it == index.end() || unit_of_[it->second] >= 0) continue;  // frozen, or tied to an earlier unit
      unit_of_[it->second] = int(units_.size());
      u.params.push_back(it->second);
    }
    units_.push_back(std::move(u));
    const size_t ui = units_.size() - 1;
    // A checkpointed block: its wrapper runs the forward under no grad and again, with grad, in
    // backward. The gathering goes inside that region, so the recomputation gathers again.
    const nn::Module::ForwardWrapper checkpointed = m->forward_wrapper();
    nn::Module::ForwardWrapper fsdp = [this, ui, recomputed = bool(checkpointed)](
                                          nn::Module&, const Tensor& x, const nn::Module::ForwardFn& forward) {
      Unit& unit = units_[ui];
      const bool backward = recomputed && grad_enabled();  // a checkpoint's recomputation
      use(ui);
      // The unit that runs next (size_t wraps: none). A recomputation prefetches once its
      // backward has begun (grad_ready): while it recomputes, its activations peak.
      if (!backward) prefetch(ui + 1);
      unit.grads = 0;  // this micro-batch's backward counts them again
      // No grad (evaluation, a checkpoint's forward): nothing is saved; with resharding the
      // copies go at once.
      if (!grad_enabled()) {
        Tensor y = forward(x);
        if (reshard_) release(unit);
        return y;
      }
      // Kept until the unit's gradients are all in (grad_ready): without resharding, or in a
      // recomputation or the last unit (the head), whose backward follows at once.
      if (!reshard_ || recomputed || ui + 1 == units_.size()) return forward(x);
      // Saved unit parameters become references, re-gathered in backward.
      std::map<const TensorImpl*, size_t> mine;
      for (size_t i : unit.params) mine[params_[i].impl()] = i;
      Tensor y;
      {
        SavedTensorHooksScope hooks(
            [mine](const Tensor& t) -> PackedTensor {
              auto it = mine.find(t.impl());
              if (it != mine.end()) return SavedParam{it->second};
              return t;
            },
            [this](const PackedTensor& p) -> Tensor {
              if (const SavedParam* s = std::any_cast<SavedParam>(&p)) {
                const size_t u = size_t(unit_of_[s->index]);
                use(u);
                prefetch_backward(u - 1);
                return params_[s->index];
              }
              return std::any_cast<Tensor>(p);
            });
        y = forward(x);
      }
      release(unit);
      return y;
    };
    if (!checkpointed) {
      m->set_forward_wrapper(fsdp);
      continue;
    }
    m->set_forward_wrapper([checkpointed, fsdp](nn::Module& self, const Tensor& x, const nn::Module::ForwardFn& forward) {
      nn::Module::ForwardFn gathered = [fsdp, &self, forward](const Tensor& in) { return fsdp(self, in, forward); };
      return checkpointed(self, x, gathered);
    });
  }
  move_out_of_flat_store(model);
}

FsdpUnits::~FsdpUnits() = default;

// The flat store is one allocation: it is freed only when no tensor views it any more. Each
// tensor the rank keeps gets its own allocation (same values), the others none. Tensors that
// already have a storage of their own (the sharded build's, or a store of one) keep it. The kept values
// wait in host memory while the store goes, so the device never holds the store and the copies
// at once (that would be the run's peak: the whole model plus this rank's share of it).
void FsdpUnits::move_out_of_flat_store(nn::Module& model) {
  std::map<const TensorImpl*, size_t> index;
  for (size_t i = 0; i < params_.size(); ++i) index[params_[i].impl()] = i;
  std::vector<Tensor> all;
  for (auto& [n, p] : model.named_parameters()) all.push_back(p);
  for (auto& [n, b] : model.named_buffers()) all.push_back(b);
  struct Kept {
    TensorImpl* impl;
    Category category;
    std::vector<char> host;
  };
  // How many of the model's tensors each storage holds: a kept tensor alone in its own (the
  // sharded build made it so, fsdp_build.h) stays where it is.
  std::map<const Storage*, int> holders;
  {
    std::set<const TensorImpl*> seen;
    for (Tensor& t : all)
      if (seen.insert(t.impl()).second && t.storage()) ++holders[t.storage().get()];
  }
  std::vector<Kept> kept;
  std::set<const TensorImpl*> seen;
  for (Tensor& t : all) {
    if (!seen.insert(t.impl()).second) continue;  // tied: one tensor under two names
    auto it = index.find(t.impl());
    const bool dropped = it != index.end() && in_unit(it->second) && owner_[it->second] != comm_.rank();
    if (!dropped && (!t.storage() || holders[t.storage().get()] == 1)) continue;
    if (!dropped) {
      Kept k{t.impl(), t.category(), {}};
      if (!t.device().is_meta()) {
        Tensor c = t.contiguous();
        k.host.resize(size_t(c.nbytes()));
        backend_for(c.device()).copy_to_host(k.host.data(), c);
      }
      kept.push_back(std::move(k));
    }
    t.impl()->storage = nullptr;
  }
  all.clear();
  for (Kept& k : kept) {  // the store is freed by now
    MemoryCategoryScope cat(k.category);
    Tensor own = Tensor::empty(k.impl->shape, k.impl->dtype, k.impl->device);
    if (!own.device().is_meta()) backend_for(own.device()).copy_from_host(own, k.host.data());
    k.impl->storage = own.impl()->storage;
    k.impl->offset = 0;
    k.impl->strides = own.strides();
  }
}

// The unit's missing parameters get fresh allocations (the compute stream's pool), then every
// parameter is broadcast by its owner in one group on the communication stream, after the
// compute stream's work so far (the optimizer's update of the owners' copies, the last use of the
// memory the allocations reuse). use() makes the compute stream wait for it.
void FsdpUnits::gather(Unit& u) {
  if (u.gathered) return;
  for (size_t i : u.params) {
    Tensor& p = params_[i];
    if (owner_[i] == comm_.rank()) continue;
    MemoryCategoryScope cat(Category::Parameter);
    Tensor fresh = Tensor::empty(p.shape(), p.dtype(), p.device());
    p.impl()->storage = fresh.impl()->storage;
    p.impl()->offset = 0;
  }
  Event before(device_);
  before.record();
  if (!u.arrived) u.arrived = std::make_unique<Event>(device_);
  {
    StreamGuard on_comm(kCommStream);
    before.block_current_stream();
    void* stream = backend_for(device_).native_stream();
    comm_.group_start();
    for (size_t i : u.params) comm_.broadcast(params_[i].raw_data(), params_[i].nbytes(), owner_[i], stream);
    comm_.group_end();
    u.arrived->record();
  }
  // The copies are written by the communication stream: freed, they wait for it (release()).
  for (size_t i : u.params)
    if (owner_[i] != comm_.rank()) record_stream(params_[i], kCommStream);
  u.gathered = true;
  u.waited = false;
}

void FsdpUnits::use(size_t ui) {
  Unit& u = units_[ui];
  gather(u);
  if (u.waited) return;
  u.arrived->block_current_stream();
  u.waited = true;
}

void FsdpUnits::prefetch(size_t ui) {
  if (ui < units_.size()) gather(units_[ui]);
}

void FsdpUnits::prefetch_backward(size_t ui) {
  if (ui < units_.size() && units_[ui].backward_reads) gather(units_[ui]);
}

void FsdpUnits::release(Unit& u) {
  if (!u.gathered) return;
  if (!u.waited) use(size_t(&u - units_.data()));  // a prefetch never used: its broadcast still writes
  for (size_t i : u.params)
    if (owner_[i] != comm_.rank()) params_[i].impl()->storage = nullptr;
  u.gathered = false;
}

void FsdpUnits::grad_ready(size_t i) {
  if (unit_of_[i] < 0) return;
  const size_t ui = size_t(unit_of_[i]);
  Unit& u = units_[ui];
  if (u.grads == u.params.size() / 2 && u.recomputed) prefetch_backward(ui - 1);
  if (++u.grads == u.params.size()) release(u);
}

void FsdpUnits::gather_all() {
  for (size_t u = 0; u < units_.size(); ++u) use(u);
}

void FsdpUnits::visit_gathered(const std::function<void(const Tensor&, bool)>& visit) {
  for (size_t u = 0; u < units_.size(); ++u) {
    use(u);
    for (size_t i : units_[u].params) visit(params_[i], owner_[i] == comm_.rank());
    release(units_[u]);
  }
}

void FsdpUnits::release_all() {
  for (Unit& u : units_) release(u), u.grads = 0;
}

}  // namespace lt::dist
