// STUB: replaced by the attention implementation.
#include "backend/cpu/cpu_backend.h"
#include "leantrain/error.h"
namespace lt {
#define TODO fail("not implemented yet", __func__, "")
void CpuBackend::attention_fwd(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, bool, float) { TODO; }
void CpuBackend::attention_bwd(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, bool, float) { TODO; }
}
