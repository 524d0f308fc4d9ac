// Whether this test binary runs under AddressSanitizer (scripts/sanitize.sh), and how sparsely a
// test that repeats the same code over thousands of inputs samples them there. ASan makes such a
// loop 5-10x slower and sees nothing new after the first few hundred inputs: the paths are the
// same. The main build still checks every input; CI runs both (docs/testing.md, "CI time").
#pragma once

#include <cstddef>

namespace lt_test {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

// Every how many inputs a long reference comparison checks: 1 normally, 8 under ASan.
inline constexpr size_t kReferenceStride = kSanitized ? 8 : 1;

}  // namespace lt_test
