// The reference backend. It defines what each op means: accumulation in f32 (f64 for f64),
// f16/bf16 converted on load and store. It has every op of backend_ops.def; each op family's
// kernels live in their own file (cpu_copy, cpu_elementwise, cpu_reduce, cpu_gemm, cpu_norm,
// cpu_attention, cpu_embedding, cpu_loss, cpu_optim, cpu_optim_lean).
#pragma once
#include "backend/backend.h"

namespace lt {

class CpuBackend final : public Backend {
 public:
  const char* name() const override { return "cpu"; }
#define LT_BACKEND_OP(group, ret, op, params, args) ret op params override;
#include "backend/backend_ops.def"
};

}  // namespace lt
