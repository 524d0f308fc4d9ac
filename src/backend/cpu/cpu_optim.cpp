// STUB: replaced by the optimizer implementation.
#include "backend/cpu/cpu_backend.h"
#include "leantrain/error.h"
namespace lt {
#define TODO fail("not implemented yet", __func__, "")
void CpuBackend::adamw_step(std::span<const Tensor>, std::span<const Tensor>, std::span<const Tensor>, std::span<const Tensor>, const AdamWArgs&) { TODO; }
void CpuBackend::sgd_step(std::span<const Tensor>, std::span<const Tensor>, std::span<const Tensor>, const SgdArgs&) { TODO; }
}
