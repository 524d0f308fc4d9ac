// The Optimizer base: parameter bookkeeping, lazy state, batching of backend calls, state dicts.
// Subclasses only say which state they keep and how one batch is updated, so Lion, 8-bit and
// bf16-state variants slot in without touching the step logic.
#include "leantrain/optim.h"

#include <deque>
#include <unordered_set>

#include "backend/dry_compute.h"
#include "leantrain/autocast.h"
#include "leantrain/autograd.h"
#include "leantrain/error.h"
#include "leantrain/ops.h"
#include "leantrain/random.h"

namespace lt {

Optimizer::Optimizer(std::vector<ParamGroup> groups, double lr, double default_weight_decay, const char* kind)
    : lr_(lr) {
  LT_CHECK(lr >= 0, std::string(kind) + ": learning rate " + std::to_string(lr) + " is negative",
           "the update would climb the loss", "pass lr >= 0");
  std::unordered_set<std::string> names;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    double wd = groups[gi].weight_decay.value_or(default_weight_decay);
    LT_CHECK(wd >= 0, std::string(kind) + ": weight decay " + std::to_string(wd) + " is negative",
             "decay must shrink the weights", "pass weight_decay >= 0");
    std::vector<Slot> slots;
    for (auto& [name, t] : groups[gi].params) {
      LT_CHECK(t.defined(), std::string(kind) + ": parameter '" + name + "' is undefined", "it has no tensor",
               "pass the model's parameters");
      LT_CHECK(is_floating(t.dtype()), std::string(kind) + ": parameter '" + name + "' is " + dtype_name(t.dtype()),
               "only floating tensors can be optimized", "pass floating parameters");
      LT_CHECK(t.is_contiguous(), std::string(kind) + ": parameter '" + name + "' is not contiguous",
               "the update kernels walk parameters linearly", "pass leaf tensors, not views");
      LT_CHECK(names.insert(name).second, std::string(kind) + ": parameter name '" + name + "' appears twice",
               "state dict keys would collide", "give each parameter a unique name");
      for (const auto& g : groups_)
        for (const Slot& o : g)
          LT_CHECK(!o.param.same(t), std::string(kind) + ": parameter '" + name + "' is listed twice",
                   "it is also '" + o.name + "'; a parameter may belong to one group only", "remove the duplicate");
      for (const Slot& o : slots)
        LT_CHECK(!o.param.same(t), std::string(kind) + ": parameter '" + name + "' is listed twice",
                 "it is also '" + o.name + "'; a parameter may belong to one group only", "remove the duplicate");
      index_[name] = {gi, slots.size()};
      slots.push_back(Slot{name, t, {}, 0, wd, Tensor(), int64_t(index_.size()) - 1, Tensor()});
    }
    groups_.push_back(std::move(slots));
  }
}

Optimizer::~Optimizer() { drop_kept(); }

void Optimizer::set_kept_casts(std::optional<DType> dtype) {
  LT_CHECK(!dtype || *dtype == DType::BF16 || *dtype == DType::F16,
           std::string(name()) + ": kept casts in " + dtype_name(*dtype), "autocast computes in bf16 or f16",
           "pass bf16 or f16");
  if (dtype == kept_dtype_) return;
  drop_kept();
  kept_dtype_ = dtype;
  if (dtype) detail::arm_kept_casts(true);
}

void Optimizer::drop_kept() {
  if (!kept_dtype_) return;
  for (auto& group : groups_)
    for (Slot& s : group)
      if (s.kept.defined()) {
        detail::drop_kept_cast(s.param);
        s.kept = Tensor();
      }
  detail::arm_kept_casts(false);
  kept_dtype_.reset();
}

// The kept cast of an f32 parameter autocast has asked for, allocated (for real on a dry step,
// like the state) on the first update that finds it wanted. Parameters that lie back to back in
// one store (a stacked GEMM's q | k | v, gate | up) get their copies back to back in one
// allocation, together, so that the stack of the copies is a view too (nn::stacked_copies).
void Optimizer::ensure_kept(Slot& s) {
  auto wants = [&](const Slot& t) {
    return !t.kept.defined() && t.param.dtype() == DType::F32 && t.param.is_contiguous() && t.param.storage() &&
           detail::cast_wanted(t.param);
  };
  if (!kept_dtype_ || !wants(s)) return;
  // The run of wanting slots around s whose parameters follow one another (updates inside the
  // backward meet a stack's last parameter first).
  auto find = [&](auto&& is_it) -> Slot* {
    for (auto& group : groups_)
      for (Slot& t : group)
        if (&t != &s && t.param.storage() == s.param.storage() && is_it(t) && wants(t)) return &t;
    return nullptr;
  };
  std::deque<Slot*> run{&s};
  while (Slot* next = find([&](const Slot& t) { return t.param.offset() == run.back()->param.offset() + run.back()->param.numel(); }))
    run.push_back(next);
  while (Slot* prev = find([&](const Slot& t) { return t.param.offset() + t.param.numel() == run.front()->param.offset(); }))
    run.push_front(prev);
  int64_t numel = 0;
  for (Slot* t : run) numel += t->param.numel();
  MemoryCategoryScope scope(Category::Parameter);
  const Tensor block = Tensor::empty({numel}, *kept_dtype_, s.param.device());
  int64_t at = 0;
  for (Slot* t : run) {
    t->kept = make_view(block, t->param.shape(), contiguous_strides(t->param.shape()), block.offset() + at);
    at += t->param.numel();
  }
}

void Optimizer::ensure_state(Slot& s) {
  if (!s.state.empty() || state_names().empty()) return;
  MemoryCategoryScope scope(Category::OptimizerState);
  DryCompute real(false);  // a dry step's new state is zeroed for real
  // With a master copy the state follows it (f32), as the update runs on the copy.
  s.state = make_state(s.master.defined() ? s.master : s.param, state_device_of(s));
}

bool Optimizer::wants_master(const Slot& s) const {
  return master_ && (s.param.dtype() == DType::F16 || s.param.dtype() == DType::BF16);
}

void Optimizer::ensure_master(Slot& s) {
  if (!wants_master(s) || s.master.defined()) return;
  MemoryCategoryScope scope(Category::OptimizerState);
  DryCompute real(false);  // a dry step's new master copy is copied for real
  s.master = Tensor::empty(s.param.shape(), DType::F32, state_device_of(s));
  copy_(s.master, s.param);
}

// One parameter updated away from itself: through its f32 master copy, and/or where its state
// lives. The subclass sees a slot whose parameter is the master copy (or a copy of the parameter
// on the state device) and whose gradient is the cast/moved gradient, so its kernels need no new
// dtype or device combination. Slots go one at a time, so these temporaries (Workspace) exist
// for one parameter at a time.
void Optimizer::update_elsewhere(Slot& s, float grad_scale) {
  const Device where = state_device_of(s);
  Slot view = s;  // shares the state tensors
  view.kept = Tensor();  // written below from the parameter itself, which lives elsewhere than the view
  {
    MemoryCategoryScope ws(Category::Workspace);
    if (s.master.defined()) {
      view.param = s.master;
    } else {
      view.param = Tensor::empty(s.param.shape(), s.param.dtype(), where);
      copy_(view.param, s.param);
    }
    const Tensor g = s.param.grad();
    if (g.device() == where) {
      view.param.set_grad(g.dtype() == view.param.dtype() ? g : cast(g, view.param.dtype()));
    } else {
      Tensor moved = Tensor::empty(g.shape(), view.param.dtype(), where);
      copy_(moved, g);
      view.param.set_grad(moved);
    }
  }
  update({&view}, grad_scale);
  view.param.set_grad(Tensor());
  copy_(s.param, view.param);  // (master: rounded to nearest into the 16-bit parameter)
}

// Updates slots that all have grads: allocates missing state, then one backend call per run of
// slots sharing (device, step); normally that is one call for the whole group.
void Optimizer::update_batch(std::vector<Slot*>& slots, float grad_scale) {
  for (Slot* s : slots) {
    Tensor g = s->param.grad();
    const std::string who = std::string(name()) + ": gradient of '" + s->name + "'";
    LT_CHECK(g.shape() == s->param.shape() && g.dtype() == s->param.dtype() &&
                 (g.device() == s->param.device() || accepts_grad_device(s->param, g)),
             who + " does not match its parameter",
             "grad " + shape_str(g.shape()) + " " + dtype_name(g.dtype()) + " on " + g.device().str() + " vs param " +
                 shape_str(s->param.shape()) + " " + dtype_name(s->param.dtype()) + " on " + s->param.device().str(),
             "set grads of the parameter's shape, dtype and device");
    LT_CHECK(g.is_contiguous(), who + " is not contiguous", "the update kernels walk gradients linearly",
             "store a contiguous gradient");
    ensure_master(*s);
    ensure_state(*s);
    ensure_kept(*s);
  }
  // After its update, each kept cast holds the new values (unless the update was dry): registered,
  // so that the next autocast() hands it out.
  auto kept_written = [&](const std::vector<Slot*>& ss, bool written_by_update) {
    for (Slot* s : ss) {
      if (!s->kept.defined()) continue;
      if (!written_by_update) copy_(s->kept, s->param);
      if (!DryCompute::active()) detail::keep_cast(s->param, s->kept);
    }
  };
  std::vector<bool> done(slots.size(), false);
  for (size_t i = 0; i < slots.size(); ++i) {
    if (done[i]) continue;
    if (updates_elsewhere(*slots[i])) {
      update_elsewhere(*slots[i], grad_scale);
      kept_written({slots[i]}, false);
      ++slots[i]->step;
      done[i] = true;
      continue;
    }
    std::vector<Slot*> batch;
    for (size_t j = i; j < slots.size(); ++j) {
      if (done[j] || updates_elsewhere(*slots[j]) || slots[j]->step != slots[i]->step ||
          !(slots[j]->param.device() == slots[i]->param.device()))
        continue;
      batch.push_back(slots[j]);
      done[j] = true;
    }
    update(batch, grad_scale);
    kept_written(batch, writes_kept_casts());
    for (Slot* s : batch) ++s->step;
  }
}

void Optimizer::step(float grad_scale) {
  for (auto& group : groups_) {
    std::vector<Slot*> ready;
    for (Slot& s : group)
      if (s.param.grad().defined()) ready.push_back(&s);
    if (!ready.empty()) update_batch(ready, grad_scale);
  }
}

bool Optimizer::measures_norm() const {
  if (!update_measures_norm() || master_ || state_device_) return false;
  const Slot* first = nullptr;
  for (const auto& group : groups_)
    for (const Slot& s : group) {
      if (!first) first = &s;
      if (!(s.param.device() == first->param.device())) return false;
    }
  return first != nullptr;
}

void Optimizer::step_measuring(const Tensor& sumsq) {
  LT_CHECK(measures_norm(), std::string(name()) + ": step_measuring where the update cannot measure the norm",
           "it needs an update kernel that sums the squares, no master copies and one device",
           "call step() and clip_grad_norm() instead");
  measuring_ = sumsq;
  try {
    step(1.0f);
  } catch (...) {
    measuring_ = Tensor();
    throw;
  }
  measuring_ = Tensor();
}

void Optimizer::dry_step(float grad_scale) {
  std::vector<int64_t> steps;
  for (const auto& group : groups_)
    for (const Slot& s : group) steps.push_back(s.step);
  {
    DryCompute dry(true);
    step(grad_scale);
  }
  size_t i = 0;
  for (auto& group : groups_)
    for (Slot& s : group) s.step = steps[i++];
}

Optimizer::Slot& Optimizer::slot(const std::string& param_name, const char* what) {
  auto it = index_.find(param_name);
  LT_CHECK(it != index_.end(), std::string(name()) + ": " + what + " of '" + param_name + "', which this optimizer does not own",
           "no parameter of that name was passed at construction", "pass one of the optimizer's parameter names");
  return groups_[it->second.first][it->second.second];
}

const Optimizer::Slot* Optimizer::find_slot(const Tensor& param) const {
  for (const auto& group : groups_)
    for (const Slot& s : group)
      if (s.param.same(param)) return &s;
  return nullptr;
}

void Optimizer::step_param(const std::string& param_name, float grad_scale) {
  Slot& s = slot(param_name, "step_param");
  LT_CHECK(s.param.grad().defined(), std::string(name()) + ": step_param on '" + s.name + "', which has no grad",
           "the update needs a gradient", "call it after the gradient is accumulated");
  std::vector<Slot*> one{&s};
  update_batch(one, grad_scale);
}

bool Optimizer::prepare_param(const std::string& param_name) {
  Slot& s = slot(param_name, "prepare_param");
  ensure_master(s);
  ensure_state(s);
  ensure_kept(s);
  return !updates_elsewhere(s);
}

void Optimizer::step_param(const Tensor& param, float grad_scale) {
  const Slot* s = find_slot(param);
  LT_CHECK(s, std::string(name()) + ": step_param on a tensor this optimizer does not own",
           "it was not among the parameters passed at construction", "pass one of the optimizer's parameters");
  step_param(s->name, grad_scale);
}

void Optimizer::rebind(const std::string& param_name, const Tensor& param) {
  Slot& s = slot(param_name, "rebind");
  LT_CHECK(param.defined() && param.shape() == s.param.shape() && param.dtype() == s.param.dtype() &&
               param.device() == s.param.device() && param.is_contiguous(),
           std::string(name()) + ": rebind of '" + param_name + "' to another kind of tensor",
           "the state was made for " + shape_str(s.param.shape()) + " " + dtype_name(s.param.dtype()) + " on " +
               s.param.device().str(),
           "rebind to a contiguous tensor of the same shape, dtype and device");
  if (s.kept.defined()) {  // the cast was of the old tensor; the next update keeps one of the new
    detail::drop_kept_cast(s.param);
    s.kept = Tensor();
  }
  s.param = param;
}

void Optimizer::set_state_device(std::optional<Device> d) {
  LT_CHECK(step_count() == 0 && state_bytes() == 0, std::string(name()) + ": state device set after the first update",
           "the state already exists on its device", "call set_state_device before the first step");
  state_device_ = d;
}

void Optimizer::zero_grad(bool set_to_none) { lt::zero_grad(params(), set_to_none); }

std::vector<Tensor> Optimizer::params() const {
  std::vector<Tensor> out;
  for (const auto& group : groups_)
    for (const Slot& s : group) out.push_back(s.param);
  return out;
}

std::vector<NamedTensor> Optimizer::named_params() const {
  std::vector<NamedTensor> out;
  for (const auto& group : groups_)
    for (const Slot& s : group) out.emplace_back(s.name, s.param);
  return out;
}

int64_t Optimizer::step_count() const {
  int64_t m = 0;
  for (const auto& group : groups_)
    for (const Slot& s : group) m = std::max(m, s.step);
  return m;
}

int64_t Optimizer::state_bytes() const {
  int64_t n = 0;
  for (const auto& group : groups_)
    for (const Slot& s : group)
      for (const Tensor& t : s.state) n += t.nbytes();
  for (const auto& group : groups_)
    for (const Slot& s : group)
      if (s.master.defined()) n += s.master.nbytes();
  return n;
}

void Optimizer::set_master_weights(bool on) {
  LT_CHECK(step_count() == 0 && state_bytes() == 0, std::string(name()) + ": master weights switched after the first update",
           "the state already follows the parameters' dtype", "call set_master_weights before the first step");
  LT_CHECK(!(on && sr_), std::string(name()) + ": master weights with stochastic rounding",
           "with f32 master copies the update is kept in f32, so there is nothing to round stochastically",
           "use one of the two");
  master_ = on;
}

void Optimizer::set_stochastic_rounding(bool on, uint64_t seed) {
  LT_CHECK(!(on && master_), std::string(name()) + ": stochastic rounding with master weights",
           "with f32 master copies the update is kept in f32, so there is nothing to round stochastically",
           "use one of the two");
  sr_ = on;
  sr_seed_ = seed;
}

uint64_t Optimizer::sr_stream_of(const Slot& s) const { return sr_stream(sr_seed_, uint64_t(s.step + 1), uint64_t(s.index)); }

std::vector<uint64_t> Optimizer::sr_streams(const std::vector<Slot*>& slots) const {
  std::vector<uint64_t> out;
  if (!sr_) return out;
  for (const Slot* s : slots) out.push_back(sr_stream_of(*s));
  return out;
}

Tensor Optimizer::master_of(const std::string& param_name) const {
  auto it = index_.find(param_name);
  if (it == index_.end()) return Tensor();
  return groups_[it->second.first][it->second.second].master;
}

Tensor Optimizer::master_of(const Tensor& param) const {
  const Slot* s = find_slot(param);
  return s ? s->master : Tensor();
}

OptimizerStateDict Optimizer::state_dict() const {
  OptimizerStateDict sd;
  const std::vector<std::string> names = state_names();
  MemoryCategoryScope scope(Category::Other);  // the host step counters are not device state
  for (const auto& group : groups_) {
    for (const Slot& s : group) {
      if (s.step == 0 && s.state.empty()) continue;
      for (size_t k = 0; k < s.state.size(); ++k) sd.tensors[s.name + "." + names[k]] = s.state[k];
      if (s.master.defined()) sd.tensors[s.name + ".master"] = s.master;
      sd.tensors[s.name + ".step"] = from_ints({s.step}, {1});
    }
  }
  sd.step = step_count();
  return sd;
}

void Optimizer::load_state_dict(const OptimizerStateDict& sd) {
  const std::vector<std::string> names = state_names();
  const std::string who = std::string(name()) + " state";
  std::unordered_set<std::string> used;
  for (auto& group : groups_) {
    for (Slot& s : group) {
      std::vector<const Tensor*> found;
      for (const std::string& n : names) {
        auto it = sd.tensors.find(s.name + "." + n);
        if (it == sd.tensors.end()) continue;
        found.push_back(&it->second);
        used.insert(it->first);
      }
      auto master_it = sd.tensors.find(s.name + ".master");
      if (master_it != sd.tensors.end()) {
        used.insert(master_it->first);
        LT_CHECK(wants_master(s), who + ": '" + master_it->first + "' is an f32 master copy",
                 "this optimizer keeps none (master weights are for f16/bf16 parameters and must be switched on)",
                 "resume with the precision and --master-weights fp32 that saved it");
        LT_CHECK(master_it->second.shape() == s.param.shape(),
                 who + ": '" + master_it->first + "' has shape " + shape_str(master_it->second.shape()),
                 "the parameter is " + shape_str(s.param.shape()), "resume with the model configuration that saved it");
        ensure_master(s);
        copy_(s.master, master_it->second);
      }
      auto step_it = sd.tensors.find(s.name + ".step");
      int64_t step = -1;
      if (step_it != sd.tensors.end()) {
        used.insert(step_it->first);
        LT_CHECK(step_it->second.numel() == 1, who + ": '" + step_it->first + "' is not a scalar",
                 "shape " + shape_str(step_it->second.shape()), "save the step as one value");
        step = int64_t(step_it->second.item());
      }
      LT_CHECK(found.empty() || found.size() == names.size(),
               who + ": '" + s.name + "' has " + std::to_string(found.size()) + " of " + std::to_string(names.size()) +
                   " state tensors",
               "the checkpoint is incomplete or from another optimizer", "resume with the optimizer that saved it");
      if (found.empty()) {
        s.state.clear();
        s.step = step >= 0 ? step : (names.empty() ? sd.step : 0);
        LT_CHECK(names.empty() || s.step == 0, who + ": '" + s.name + "' has step " + std::to_string(s.step) +
                                                   " but no state tensors",
                 "the checkpoint is incomplete or from another optimizer", "resume with the optimizer that saved it");
        continue;
      }
      ensure_master(s);  // before the state, which follows the master's dtype
      ensure_state(s);
      for (size_t k = 0; k < names.size(); ++k) {
        LT_CHECK(found[k]->shape() == s.state[k].shape(), who + ": '" + s.name + "." + names[k] + "' has shape " +
                                                              shape_str(found[k]->shape()),
                 "the parameter needs " + shape_str(s.state[k].shape()),
                 "resume with the model configuration that saved it");
        copy_(s.state[k], *found[k]);
      }
      s.step = step >= 0 ? step : sd.step;
    }
  }
  for (const auto& [key, t] : sd.tensors)
    LT_CHECK(used.count(key), who + ": key '" + key + "' matches no parameter",
             "the checkpoint is from another model or optimizer", "resume with the configuration that saved it");
}

}  // namespace lt
