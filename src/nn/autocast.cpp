// The autocast scope is thread-local, like the grad mode: a data-loader thread never sees the
// training thread's policy. Casting only f32 leaves f64 (gradchecks) and 16-bit tensors alone.
#include "leantrain/autocast.h"

#include "leantrain/error.h"
#include "leantrain/ops.h"

namespace lt {

namespace {
thread_local std::optional<DType> t_autocast;
}  // namespace

std::optional<DType> autocast_dtype() { return t_autocast; }

AutocastGuard::AutocastGuard(std::optional<DType> dtype) : prev_(t_autocast) {
  LT_CHECK(!dtype || *dtype == DType::BF16 || *dtype == DType::F16,
           std::string("autocast to ") + dtype_name(*dtype), "autocast computes in a 16-bit float type",
           "pass bf16 or f16");
  t_autocast = dtype;
}

AutocastGuard::~AutocastGuard() { t_autocast = prev_; }

Tensor autocast(const Tensor& t) {
  if (!t_autocast || !t.defined() || t.dtype() != DType::F32) return t;
  return cast(t, *t_autocast);
}

Tensor autocast_like(const Tensor& p, const Tensor& x) {
  if (!t_autocast || !p.defined() || p.dtype() == x.dtype() || !is_floating(p.dtype()) || !is_floating(x.dtype()))
    return p;
  return cast(p, x.dtype());
}

}  // namespace lt
