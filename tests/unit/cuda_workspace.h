// For GPU tests of kernels that borrow the cuBLASLt workspace as scratch (the norms' dw/db sums,
// the two-pass column sums): one small GEMM leaves the workspace held, so those kernels take
// their borrowing paths from then on. Call inside ASSERT_NO_FATAL_FAILURE.
#pragma once
#include <gtest/gtest.h>

#include "leantrain/cuda_info.h"
#include "leantrain/ops.h"

namespace lt::test {

inline void hold_cublaslt_workspace() {
  Generator gen(3);
  (void)matmul(randn({8, 8}, gen, 1.0f, DType::BF16, Device::cuda()),
               randn({8, 8}, gen, 1.0f, DType::BF16, Device::cuda()));
  ASSERT_GT(cuda_memory_info(0).workspace_bytes, 0) << "a matmul did not leave the cuBLASLt workspace held";
}

}  // namespace lt::test
