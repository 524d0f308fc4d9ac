// FsdpUnits (fsdp_units.h).
#include "dist/fsdp_units.h"

#include <algorithm>
#include <any>
#include <map>
#include <set>

#include "backend/backend.h"
#include "backend/event.h"
#include "leantrain/autocast.h"
#include "leantrain/autograd.h"
#include "leantrain/checkpoint.h"
#include "leantrain/models.h"
#include "memory/streams.h"
#include "ops/op_common.h"

namespace lt::dist {

namespace {

// A saved unit parameter: which one, so unpack can re-gather it.
struct SavedParam {
  size_t index;
};

// A saved view of a unit's store of 16-bit copies (a copy, or the stack of several that one GEMM
// reads): where it lies in the store, so unpack can re-gather the unit and view it again.
struct SavedView {
  size_t unit;
  Shape shape, strides;
  int64_t offset;
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
                     const std::vector<int>& owner, bool reshard_after_forward, Device device, std::optional<DType> low)
    : comm_(comm), device_(device), params_(params), owner_(owner), unit_of_(params.size(), -1),
      reshard_(reshard_after_forward), low_dtype_(low), low_(params.size()) {
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
    // A block reads its parameters through autocast only, so it can be gathered as the copies
    // autocast would make (an untied table's lookup reads the f32 table: it stays f32). Matrices
    // first, then vectors, each in module order: the projections one GEMM stacks (q | k | v,
    // gate | up) and their biases then lie back to back, and the stack is a view.
    bool all_f32 = true;
    for (size_t i : u.params) all_f32 = all_f32 && params_[i].dtype() == DType::F32;
    u.low = low_dtype_ && all_f32 && nn::is_transformer_block(*m);
    if (u.low)
      std::stable_partition(u.params.begin(), u.params.end(), [this](size_t i) { return params_[i].dim() >= 2; });
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
      if (grad_enabled()) record_casts(unit);
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
      // Views of the unit's 16-bit store (its copies, their stacks) are re-gathered the same way.
      const Storage* store = unit.gathered_low() ? unit.store.storage().get() : nullptr;
      Tensor y;
      {
        SavedTensorHooksScope hooks(
            [mine, store, ui](const Tensor& t) -> PackedTensor {
              auto it = mine.find(t.impl());
              if (it != mine.end()) return SavedParam{it->second};
              if (store && t.storage().get() == store) return SavedView{ui, t.shape(), t.strides(), t.offset()};
              return t;
            },
            [this](const PackedTensor& p) -> Tensor {
              if (const SavedParam* s = std::any_cast<SavedParam>(&p)) {
                const size_t u = size_t(unit_of_[s->index]);
                use(u);
                prefetch_backward(u - 1);
                return params_[s->index];
              }
              if (const SavedView* v = std::any_cast<SavedView>(&p)) {
                use(v->unit);
                prefetch_backward(v->unit - 1);
                LT_ASSERT(units_[v->unit].gathered_low());
                return make_view(units_[v->unit].store, v->shape, v->strides, v->offset);
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

// Nothing stays registered with autocast past the units: a plan replays several ranks in one
// process, and a later model's parameters may reuse these addresses.
FsdpUnits::~FsdpUnits() {
  for (Unit& u : units_)
    if (u.gathered_low())
      for (size_t i : u.params) lt::detail::unregister_precast(params_[i]);
}

// The flat store is one allocation: it is freed only when no tensor views it any more. Each
// tensor the rank keeps gets its own allocation (same values), the others none. Tensors that
// already have a storage of their own (the sharded build's, or a store of one) keep it. The kept
// values wait in host memory while the store goes, so the device never holds the store and the
// copies at once (that would be the run's peak: the whole model plus this rank's share of it).
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
  // Only under the autocast that would make the same copies (an evaluation without it reads f32).
  if (u.low && !force_f32_ && autocast_dtype() == low_dtype_) {
    // One store for the unit's copies, each view at a 512-byte boundary as in the parameter
    // store; the owner casts its parameters into their views (the compute stream), then every
    // copy is broadcast by its owner. Autocast hands them out in the parameters' place.
    const DType dt = *low_dtype_;
    std::vector<int64_t> at;
    int64_t elems = 0;
    for (size_t i : u.params) {
      at.push_back(elems);
      elems += nn::ParamFactory::flat_bytes(params_[i].shape(), dt) / int64_t(dtype_size(dt));
    }
    MemoryCategoryScope cat(Category::Parameter);
    NoGradGuard no_grad;
    u.store = Tensor::empty({elems}, dt, device_);
    for (size_t k = 0; k < u.params.size(); ++k) {
      const size_t i = u.params[k];
      const Tensor& p = params_[i];
      low_[i] = make_view(u.store, p.shape(), contiguous_strides(p.shape()), at[k]);
      if (owner_[i] == comm_.rank()) backend_for(device_).copy(low_[i], p);
      lt::detail::register_precast(p, low_[i]);
    }
  } else {
    for (size_t i : u.params) {
      Tensor& p = params_[i];
      if (owner_[i] == comm_.rank()) continue;
      MemoryCategoryScope cat(Category::Parameter);
      Tensor fresh = Tensor::empty(p.shape(), p.dtype(), p.device());
      p.impl()->storage = fresh.impl()->storage;
      p.impl()->offset = 0;
    }
  }
  const bool low = u.gathered_low();
  auto sent = [&](size_t i) -> const Tensor& { return low ? low_[i] : params_[i]; };
  Event before(device_);
  before.record();
  if (!u.arrived) u.arrived = std::make_unique<Event>(device_);
  {
    StreamGuard on_comm(kCommStream);
    before.block_current_stream();
    void* stream = backend_for(device_).native_stream();
    comm_.group_start();
    for (size_t i : u.params) comm_.broadcast(sent(i).raw_data(), sent(i).nbytes(), owner_[i], stream);
    comm_.group_end();
    u.arrived->record();
  }
  // The copies are written (an owner's 16-bit ones read) by the communication stream: freed,
  // they wait for it (release()).
  for (size_t i : u.params)
    if (low || owner_[i] != comm_.rank()) record_stream(sent(i), kCommStream);
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
  // The memory goes now, whatever still holds these tensors (a finished backward's nodes).
  const bool low = u.gathered_low();
  for (size_t i : u.params) {
    if (low) {
      lt::detail::unregister_precast(params_[i]);
      low_[i].impl()->storage = nullptr;
      low_[i] = Tensor();
    } else if (owner_[i] != comm_.rank()) {
      params_[i].impl()->storage = nullptr;
    }
  }
  u.store = Tensor();
  u.gathered = false;
}

void FsdpUnits::record_casts(Unit& u) {
  if (!u.gathered_low()) return;
  for (size_t i : u.params)
    if (params_[i].requires_grad() && !low_[i].impl()->grad_fn) lt::detail::record_cast(low_[i], params_[i]);
}

void FsdpUnits::grad_ready(size_t i) {
  if (unit_of_[i] < 0) return;
  const size_t ui = size_t(unit_of_[i]);
  Unit& u = units_[ui];
  if (u.grads == u.params.size() / 2 && u.recomputed) prefetch_backward(ui - 1);
  if (++u.grads == u.params.size()) release(u);
}

void FsdpUnits::gather_all() {
  force_f32_ = true;
  for (size_t u = 0; u < units_.size(); ++u) use(u);
  force_f32_ = false;
}

void FsdpUnits::visit_gathered(const std::function<void(const Tensor&, bool)>& visit) {
  for (size_t u = 0; u < units_.size(); ++u) {
    force_f32_ = true;
    use(u);
    force_f32_ = false;
    for (size_t i : units_[u].params) visit(params_[i], owner_[i] == comm_.rank());
    release(units_[u]);
  }
}

void FsdpUnits::release_all() {
  for (Unit& u : units_) release(u), u.grads = 0;
}

}  // namespace lt::dist
