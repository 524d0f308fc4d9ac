// The mixture-of-experts kernels of each device (backend/moe_ops.def), beside the Backend of
// backend.h: moe_kernels_for(d) as backend_for(d), meta's when a dry step runs (Note [Dry
// compute]). cpu: cpu/cpu_moe.cpp, cuda: cuda/moe.cu, meta: no-ops generated from the list.
#pragma once
#include <cstdint>
#include <span>

#include "leantrain/device.h"
#include "leantrain/tensor.h"

namespace lt {

class MoeKernels {
 public:
  virtual ~MoeKernels() = default;
  virtual const char* name() const = 0;
#define LT_MOE_OP(ret, op, params, args) virtual ret op params = 0;
#include "backend/moe_ops.def"
};

class CpuMoeKernels final : public MoeKernels {
 public:
  const char* name() const override { return "cpu"; }
#define LT_MOE_OP(ret, op, params, args) ret op params override;
#include "backend/moe_ops.def"
};

// The dry-run device: every kernel is a no-op (the front-ends allocate).
class MetaMoeKernels final : public MoeKernels {
 public:
  const char* name() const override { return "meta"; }
#define LT_MOE_OP(ret, op, params, args) \
  ret op params override {}
#include "backend/moe_ops.def"
};

MoeKernels& cuda_moe_kernels(int device_index);  // cuda/moe.cu (or the no-CUDA stub)
MoeKernels& moe_kernels_for(Device d);

}  // namespace lt
