// STUB: replaced by the norms/softmax implementation.
#include "backend/cpu/cpu_backend.h"
#include "leantrain/error.h"
namespace lt {
#define TODO fail("not implemented yet", __func__, "")
void CpuBackend::layernorm_fwd(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, float) { TODO; }
void CpuBackend::layernorm_bwd(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) { TODO; }
void CpuBackend::rmsnorm_fwd(const Tensor&, const Tensor&, const Tensor&, const Tensor&, float) { TODO; }
void CpuBackend::rmsnorm_bwd(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) { TODO; }
void CpuBackend::softmax_fwd(const Tensor&, const Tensor&) { TODO; }
void CpuBackend::softmax_bwd(const Tensor&, const Tensor&, const Tensor&) { TODO; }
}
