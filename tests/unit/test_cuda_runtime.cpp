// CUDA runtime behaviour that must hold with and without a GPU: no crash and clear errors when
// CUDA is unavailable (CPU-only CI runs the CUDA build too); on a GPU, allocations go through
// the caching allocator with categories, and an impossible request is an lt::OutOfMemoryError.
#include <gtest/gtest.h>

#include "leantrain/cuda_info.h"
#include "leantrain/error.h"
#include "leantrain/ops.h"

namespace lt {
namespace {

TEST(CudaRuntime, UnavailableIsAClearError) {
  if (cuda_available()) GTEST_SKIP() << "a GPU is present";
  EXPECT_EQ(cuda_device_count(), 0);
  EXPECT_THROW(Tensor::empty({4}, DType::F32, Device::cuda(0)), Error);
  EXPECT_THROW(cuda_memory_info(0), Error);
}

TEST(CudaRuntime, AllocationsAreCategorisedAndOomIsTyped) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  Allocator& al = allocator_for(Device::cuda(0));
  const MemoryStats before = al.stats();
  {
    MemoryCategoryScope s(Category::OptimizerState);
    Tensor t = zeros({1000}, DType::F32, Device::cuda(0));
    const MemoryStats now = al.stats();
    EXPECT_EQ(now.category[int(Category::OptimizerState)].current -
                  before.category[int(Category::OptimizerState)].current,
              4096);
    EXPECT_GE(now.reserved_bytes.current, now.allocated_bytes.current);
    EXPECT_EQ(t.to(Device::cpu()).to_float_vector()[999], 0.0f);
  }
  EXPECT_THROW(Tensor::empty({int64_t(1) << 50}, DType::U8, Device::cuda(0)), OutOfMemoryError);
  Tensor ok = ones({8}, DType::F32, Device::cuda(0));  // the device still works after the OOM
  EXPECT_EQ(ok.to(Device::cpu()).to_float_vector()[7], 1.0f);
  EXPECT_GT(cuda_memory_info(0).context_bytes, 0);
  EXPECT_FALSE(cuda_memory_summary(0).empty());
}

TEST(CudaRuntime, Tf32IsOffByDefault) { EXPECT_FALSE(cuda_allow_tf32()); }

}  // namespace
}  // namespace lt
