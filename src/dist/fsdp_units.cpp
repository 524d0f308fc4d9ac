// FsdpUnits (fsdp_units.h).
#include "dist/fsdp_units.h"

#include <any>
#include <map>

#include "leantrain/autograd.h"
#include "leantrain/checkpoint.h"

namespace lt::dist {

namespace {

// A saved unit parameter: which one, so unpack can re-gather it.
struct SavedParam {
  size_t index;
};

}  // namespace

FsdpUnits::FsdpUnits(Communicator& comm, nn::Module& model, const std::vector<Tensor>& params,
                     const std::vector<int>& owner, bool reshard_after_forward)
    : comm_(comm), params_(params), owner_(owner), unit_of_(params.size(), -1), reshard_(reshard_after_forward) {
  std::map<const TensorImpl*, size_t> index;
  for (size_t i = 0; i < params_.size(); ++i) index[params_[i].impl()] = i;
  for (auto& [path, m] : model.named_modules()) {
    if (!nn::is_transformer_block(*m)) continue;
    Unit u;
    for (auto& [n, p] : m->named_parameters()) {
      auto it = index.find(p.impl());
      if (it == index.end() || unit_of_[it->second] >= 0) continue;  // frozen, or tied to an earlier unit
      unit_of_[it->second] = int(units_.size());
      u.params.push_back(it->second);
    }
    units_.push_back(std::move(u));
    const int ui = int(units_.size()) - 1;
    m->set_forward_wrapper([this, ui](nn::Module&, const Tensor& x, const nn::Module::ForwardFn& forward) {
      Unit& unit = units_[size_t(ui)];
      gather(unit);
      unit.grads = 0;  // this micro-batch's backward counts them again
      // No grad (evaluation): nothing is saved; the copies go at once when resharding.
      if (!grad_enabled()) {
        Tensor y = forward(x);
        if (reshard_) release(unit);
        return y;
      }
      if (!reshard_) return forward(x);
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
                gather(units_[size_t(unit_of_[s->index])]);
                return params_[s->index];
              }
              return std::any_cast<Tensor>(p);
            });
        y = forward(x);
      }
      release(unit);
      return y;
    });
  }
  move_out_of_flat_store(model);
}

FsdpUnits::~FsdpUnits() = default;

// The flat store is one allocation: it is freed only when no tensor views it any more. Each
// tensor the rank keeps gets its own allocation (same values), the others none.
void FsdpUnits::move_out_of_flat_store(nn::Module& model) {
  std::map<const TensorImpl*, size_t> index;
  for (size_t i = 0; i < params_.size(); ++i) index[params_[i].impl()] = i;
  std::vector<Tensor> all;
  for (auto& [n, p] : model.named_parameters()) all.push_back(p);
  for (auto& [n, b] : model.named_buffers()) all.push_back(b);
  for (Tensor& t : all) {
    auto it = index.find(t.impl());
    const bool dropped = it != index.end() && in_unit(it->second) && owner_[it->second] != comm_.rank();
    TensorImpl* impl = t.impl();
    if (dropped) {
      impl->storage = nullptr;
      continue;
    }
    MemoryCategoryScope cat(t.category());
    Tensor own = Tensor::empty(t.shape(), t.dtype(), t.device());
    {
      NoGradGuard ng;
      copy_(own, t);
    }
    impl->storage = own.impl()->storage;
    impl->offset = 0;
    impl->strides = own.strides();
  }
}

void FsdpUnits::gather(Unit& u) {
  if (u.gathered) return;
  for (size_t i : u.params) {
    Tensor& p = params_[i];
    if (owner_[i] != comm_.rank()) {
      MemoryCategoryScope cat(Category::Parameter);
      Tensor fresh = Tensor::empty(p.shape(), p.dtype(), p.device());
      p.impl()->storage = fresh.impl()->storage;
      p.impl()->offset = 0;
    }
    comm_.broadcast(p.raw_data(), p.nbytes(), owner_[i]);
  }
  u.gathered = true;
}

void FsdpUnits::release(Unit& u) {
  if (!u.gathered) return;
  for (size_t i : u.params)
    if (owner_[i] != comm_.rank()) params_[i].impl()->storage = nullptr;
  u.gathered = false;
}

void FsdpUnits::grad_ready(size_t i) {
  if (unit_of_[i] < 0) return;
  Unit& u = units_[size_t(unit_of_[i])];
  if (++u.grads == u.params.size()) release(u);
}

void FsdpUnits::gather_all() {
  for (Unit& u : units_) gather(u);
}

void FsdpUnits::release_all() {
  for (Unit& u : units_) release(u), u.grads = 0;
}

}  // namespace lt::dist
