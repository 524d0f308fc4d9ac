// ScalarReadback (src/train/scalar_readback.h): one-element tensors copied to pinned slots as the
// stream makes them, read back with their dtype's value, and its misuse refused.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "leantrain/device.h"
#include "leantrain/error.h"
#include "leantrain/memory.h"
#include "leantrain/ops.h"
#include "train/scalar_readback.h"

using namespace lt;

namespace {

void reads_back_every_dtype(Device d) {
  ScalarReadback rb(d, 5);
  const size_t a = rb.push(full({1}, 2.5, DType::F32, d));
  const size_t b = rb.push(full({}, -0.1, DType::F64, d));
  const size_t c = rb.push(full({1, 1}, 3.0, DType::BF16, d));
  const size_t e = rb.push(full({1}, std::numeric_limits<double>::quiet_NaN(), DType::F32, d));
  const size_t f = rb.push(full({1}, 1.5, DType::F16, d));
  EXPECT_EQ(rb.size(), 5u);
  EXPECT_EQ(rb.read(a), 2.5);
  EXPECT_EQ(rb.read(b), -0.1);
  EXPECT_EQ(rb.read(c), 3.0);
  EXPECT_TRUE(std::isnan(rb.read(e)));
  EXPECT_EQ(rb.read(f), 1.5);
  rb.clear();
  EXPECT_EQ(rb.size(), 0u);
  EXPECT_EQ(rb.read(rb.push(full({1}, 7.0, DType::F32, d))), 7.0);  // slots reused after clear()
}

}  // namespace

TEST(ScalarReadback, ReadsEachValueInItsDtype) { reads_back_every_dtype(Device::cpu()); }

TEST(ScalarReadback, RefusesMisuse) {
  ScalarReadback rb(Device::cpu(), 1);
  EXPECT_THROW(rb.push(full({2}, 1.0, DType::F32, Device::cpu())), Error);  // not one element
  EXPECT_THROW(rb.read(0), Error);                                          // nothing pushed
  rb.push(full({1}, 1.0, DType::F32, Device::cpu()));
  EXPECT_THROW(rb.push(full({1}, 1.0, DType::F32, Device::cpu())), Error);  // every slot taken
}

TEST(ScalarReadback, ItsPinnedSlotsAreCountedOnce) {
  Allocator& pinned = pinned_host_allocator(Device::cpu());
  const int64_t before = pinned.stats().allocated_bytes.current;
  {
    ScalarReadback rb(Device::cpu(), 3);
    EXPECT_EQ(pinned.stats().allocated_bytes.current, before);  // nothing until the first push
    rb.push(full({1}, 1.0, DType::F32, Device::cpu()));
    const int64_t held = pinned.stats().allocated_bytes.current - before;
    EXPECT_GE(held, 24);
    rb.clear();
    rb.push(full({1}, 2.0, DType::F32, Device::cpu()));
    EXPECT_EQ(pinned.stats().allocated_bytes.current - before, held);  // one buffer for the readback's life
  }
  EXPECT_EQ(pinned.stats().allocated_bytes.current, before);
}

// On the GPU: the value a kernel wrote before the push, while more work is queued after it.
TEST(ScalarReadback, CudaReadsTheValueMadeBeforeThePush) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  const Device d = Device::cuda(0);
  reads_back_every_dtype(d);
  ScalarReadback rb(d, 1);
  Tensor x = full({1}, 1.0, DType::F32, d);
  Tensor big = full({4096, 4096}, 0.5, DType::F32, d);
  x = add(x, full({1}, 2.0, DType::F32, d));
  const size_t slot = rb.push(x);
  for (int i = 0; i < 8; ++i) big = add(big, big);  // queued behind the copy
  EXPECT_EQ(rb.read(slot), 3.0);
}
