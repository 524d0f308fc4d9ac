// checked_mul / checked_add / checked_product: exact results in range, one lt::Error naming the
// quantity when the result does not fit (including products that wrap to 0 modulo 2^64).
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "core/checked_math.h"

namespace {

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const lt::Error& e) {
    return e.what();
  }
  return "";
}

TEST(CheckedMath, ExactInRange) {
  EXPECT_EQ(lt::checked_mul<int64_t>(3037000499, 3037000499, "x"), int64_t(3037000499) * 3037000499);
  EXPECT_EQ(lt::checked_add<int64_t>(std::numeric_limits<int64_t>::max() - 1, 1, "x"),
            std::numeric_limits<int64_t>::max());
  EXPECT_EQ(lt::checked_mul<uint64_t>(0, ~uint64_t(0), "x"), 0u);
  EXPECT_EQ(lt::checked_product(std::vector<int64_t>{}, "x"), 1);
  EXPECT_EQ(lt::checked_product(std::vector<int64_t>{60000, 28, 28}, "x"), 47040000);
}

TEST(CheckedMath, OverflowNamesTheQuantity) {
  const std::string m = message_of([] { lt::checked_mul<int64_t>(int64_t(1) << 32, int64_t(1) << 31, "the tensor size"); });
  EXPECT_NE(m.find("the tensor size is too large"), std::string::npos) << m;
  EXPECT_NE(m.find("4294967296 * 2147483648 does not fit in 64-bit signed"), std::string::npos) << m;
  EXPECT_NE(message_of([] { lt::checked_add<uint64_t>(~uint64_t(0), 1, "offset"); }).find("offset is too large"),
            std::string::npos);
  EXPECT_NE(message_of([] { lt::checked_add<int64_t>(std::numeric_limits<int64_t>::min(), -1, "n"); }), "");
}

TEST(CheckedMath, ProductThatWrapsToZeroIsCaught) {
  // 2^32 * 2^32 is 0 modulo 2^64: the case that slipped past the IDX size check.
  const std::vector<uint64_t> dims{uint64_t(1) << 32, uint64_t(1) << 32, 1};
  EXPECT_NE(message_of([&] { lt::checked_product(dims, "IDX data size"); }).find("IDX data size is too large"),
            std::string::npos);
  const std::vector<int64_t> sdims{65536, 65536, 65536, 65536};
  EXPECT_NE(message_of([&] { lt::checked_product(sdims, "n"); }), "");
}

}  // namespace
