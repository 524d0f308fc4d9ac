// The autocast scope is thread-local, like the grad mode: a data-loader thread never sees the
// training thread's policy. Casting only f32 leaves f64 (gradchecks) and 16-bit tensors alone.
#include "leantrain/autocast.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "leantrain/autograd.h"
#include "leantrain/error.h"
#include "leantrain/ops.h"
#include "ops/op_common.h"

namespace lt {

namespace {
thread_local std::optional<DType> t_autocast;
// The casts autocast hands out in parameters' places (TensorImpl): AutocastPrecast's, and
// fsdp's gathered copies (detail::register_precast); each user erases its own.
thread_local std::unordered_map<const TensorImpl*, Tensor> t_precast;

// Kept casts (detail::keep_cast) and the parameters autocast cast itself. Process-wide: the
// optimizer registers them as it updates (inside backward under --fused-step), the forward reads
// them; a mutex, as both are rare next to the kernels they save.
std::mutex g_kept_mu;
std::unordered_map<const TensorImpl*, Tensor> g_kept;
std::unordered_set<const TensorImpl*> g_wanted;
std::atomic<int> g_keepers{0};  // armed keepers (detail::arm_kept_casts): 0 skips every lookup

// A view of the kept copy of `p` in `dtype`, not recorded, or an undefined tensor. The caller holds
// g_kept_mu.
Tensor kept_view(const Tensor& p, DType dtype) {
  auto it = g_kept.find(p.impl_ptr().get());
  if (it == g_kept.end() || it->second.dtype() != dtype) return Tensor();
  return make_view(it->second, p.shape(), p.strides(), it->second.offset());
}

// A view of the kept copy of `p` in `dtype` (recorded as a cast of p when gradients are wanted),
// or an undefined tensor; marks p wanted when it has none.
Tensor kept_cast_of(const Tensor& p, DType dtype) {
  std::lock_guard<std::mutex> g(g_kept_mu);
  Tensor c = kept_view(p, dtype);
  if (!c.defined()) {
    g_wanted.insert(p.impl_ptr().get());
    return Tensor();
  }
  if (p.requires_grad() && grad_enabled()) detail::record_cast(c, p);
  return c;
}

}  // namespace

void detail::arm_kept_casts(bool on) { g_keepers += on ? 1 : -1; }

void detail::keep_cast(const Tensor& param, const Tensor& copy) {
  LT_CHECK(param.dtype() == DType::F32 && (copy.dtype() == DType::BF16 || copy.dtype() == DType::F16) &&
               copy.shape() == param.shape() && param.is_contiguous() && copy.is_contiguous(),
           "keep_cast: the copy does not fit its parameter", "a kept cast is a contiguous 16-bit copy of an f32 parameter",
           "pass a copy of the parameter's shape");
  std::lock_guard<std::mutex> g(g_kept_mu);
  g_kept[param.impl_ptr().get()] = copy;
}

void detail::drop_kept_cast(const Tensor& param) {
  std::lock_guard<std::mutex> g(g_kept_mu);
  g_kept.erase(param.impl_ptr().get());
  g_wanted.erase(param.impl_ptr().get());
}

bool detail::cast_wanted(const Tensor& param) {
  std::lock_guard<std::mutex> g(g_kept_mu);
  return g_wanted.count(param.impl_ptr().get()) > 0;
}

std::vector<Tensor> detail::kept_casts_of(const std::vector<Tensor>& params, DType dtype) {
  if (g_keepers == 0) return {};
  std::lock_guard<std::mutex> g(g_kept_mu);
  std::vector<Tensor> copies;
  for (const Tensor& p : params) {
    Tensor c = p.impl()->grad_fn ? Tensor() : kept_view(p, dtype);
    if (!c.defined()) break;
    copies.push_back(std::move(c));
  }
  if (copies.size() == params.size()) return copies;
  for (const Tensor& p : params)
    if (p.defined() && p.dtype() == DType::F32 && !p.impl()->grad_fn) g_wanted.insert(p.impl_ptr().get());
  return {};
}

bool detail::has_kept_cast(const Tensor& param) {
  std::lock_guard<std::mutex> g(g_kept_mu);
  return g_kept.count(param.impl_ptr().get()) > 0;
}

const Tensor* detail::precast_of(const Tensor& t, DType dtype) {
  if (t_precast.empty()) return nullptr;
  auto it = t_precast.find(t.impl_ptr().get());
  return it != t_precast.end() && it->second.dtype() == dtype ? &it->second : nullptr;
}

void detail::register_precast(const Tensor& param, const Tensor& copy) { t_precast[param.impl_ptr().get()] = copy; }

void detail::unregister_precast(const Tensor& param) { t_precast.erase(param.impl_ptr().get()); }

bool detail::has_precast(const Tensor& param) { return t_precast.count(param.impl_ptr().get()) > 0; }

AutocastPrecast::AutocastPrecast(const std::vector<Tensor>& params) {
  if (!t_autocast || params.empty() || !t_precast.empty()) return;
  if (g_keepers > 0)  // parameters with kept casts: autocast() hands those out, the rest cast one by one
    for (const Tensor& p : params)
      if (p.defined() && detail::has_kept_cast(p)) return;
  const auto& storage = params[0].storage();
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = 0;
  for (const Tensor& p : params) {
    if (!p.defined() || p.dtype() != DType::F32 || p.storage() != storage || !storage || !p.is_contiguous()) return;
    lo = std::min(lo, p.offset());
    hi = std::max(hi, p.offset() + p.numel());
  }
  // One cast of the store's span [lo, hi) (the 512-byte padding between tensors comes along).
  const Tensor span = make_view(params[0], {hi - lo}, {1}, lo);
  Tensor out = Tensor::empty({hi - lo}, *t_autocast, span.device());
  detail::backend_of(span).copy(out, span);
  for (const Tensor& p : params) {
    Tensor c = make_view(out, p.shape(), p.strides(), p.offset() - lo);
    if (p.requires_grad()) detail::record_cast(c, p);
    t_precast.emplace(p.impl_ptr().get(), std::move(c));
  }
  params_ = params;
  active_ = true;
}

AutocastPrecast::~AutocastPrecast() {
  for (const Tensor& p : params_) detail::unregister_precast(p);
}

std::optional<DType> autocast_dtype() { return t_autocast; }

AutocastGuard::AutocastGuard(std::optional<DType> dtype) : prev_(t_autocast) {
  LT_CHECK(!dtype || *dtype == DType::BF16 || *dtype == DType::F16,
           std::string("autocast to ") + dtype_name(*dtype), "autocast computes in a 16-bit float type",
           "pass bf16 or f16");
  t_autocast = dtype;
}

AutocastGuard::~AutocastGuard() { t_autocast = prev_; }

// A kept cast is looked up only while a keeper is armed, and only for tensors without a grad_fn
// (parameters; an activation never has one kept).
Tensor autocast(const Tensor& t) {
  if (!t_autocast || !t.defined() || t.dtype() != DType::F32) return t;
  if (const Tensor* c = detail::precast_of(t, *t_autocast)) return *c;
  if (g_keepers > 0 && !t.impl()->grad_fn)
    if (Tensor k = kept_cast_of(t, *t_autocast); k.defined()) return k;
  return cast(t, *t_autocast);
}

Tensor autocast_like(const Tensor& p, const Tensor& x) {
  if (!t_autocast || !p.defined() || p.dtype() == x.dtype() || !is_floating(p.dtype()) || !is_floating(x.dtype()))
    return p;
  if (const Tensor* c = detail::precast_of(p, x.dtype())) return *c;
  if (g_keepers > 0 && p.dtype() == DType::F32 && !p.impl()->grad_fn)
    if (Tensor k = kept_cast_of(p, x.dtype()); k.defined()) return k;
  return cast(p, x.dtype());
}

Tensor autocast_tied(const Tensor& p) {
  Tensor c = autocast(p);
  if (c.defined() && c.impl() != p.impl() && c.impl()->grad_fn && c.impl()->grad_fn->casts_from_f32)
    c.impl()->grad_fn->casts_from_f32 = false;
  return c;
}

}  // namespace lt
