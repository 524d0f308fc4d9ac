// GEMM entry points of the CUDA backend beyond Backend::gemm (for fused layers later on).
#pragma once
#include "backend/backend.h"

namespace lt::cuda {

// c = gelu_tanh(alpha * op(a) op(b) + beta * c + bias[n]) through cuBLASLt's GELU epilogue
// (tanh approximation). bias may be undefined. When pre_gelu is defined (c's shape and dtype,
// n a multiple of 8) it also receives the value before the GELU, which the backward needs.
// Same layout rules as Backend::gemm: row-major, batched with element strides.
void gemm_gelu(const Tensor& c, const Tensor& a, const Tensor& b, const GemmDesc& d, const Tensor& bias,
               const Tensor& pre_gelu);

}  // namespace lt::cuda
