// Size arithmetic on numbers that come from outside (file headers, config files, flags): a
// product or sum that does not fit its type is an lt::Error naming the quantity, never a
// wrapped value that slips past a later size check. Header-only; any integer type.
#pragma once
#include <cstdint>
#include <iterator>
#include <string>
#include <type_traits>

#include "leantrain/error.h"

namespace lt {

namespace checked_detail {
template <class T>
[[noreturn]] void overflow(const std::string& what, T a, const char* op, T b, const std::string& fix) {
  fail(what + " is too large",
       std::to_string(a) + " " + op + " " + std::to_string(b) + " does not fit in " +
           std::to_string(8 * sizeof(T)) + (std::is_signed_v<T> ? "-bit signed" : "-bit unsigned") + " integers",
       fix.empty() ? "the input is corrupt or asks for an impossible size" : fix);
}
}  // namespace checked_detail

// a * b, or lt::fail("<what> is too large", ...) when it overflows T.
template <class T>
T checked_mul(T a, T b, const std::string& what, const std::string& fix = "") {
  static_assert(std::is_integral_v<T>);
  T r;
  if (__builtin_mul_overflow(a, b, &r)) checked_detail::overflow(what, a, "*", b, fix);
  return r;
}

// a + b, or lt::fail("<what> is too large", ...) when it overflows T.
template <class T>
T checked_add(T a, T b, const std::string& what, const std::string& fix = "") {
  static_assert(std::is_integral_v<T>);
  T r;
  if (__builtin_add_overflow(a, b, &r)) checked_detail::overflow(what, a, "+", b, fix);
  return r;
}

// The product of all elements of a range (1 for an empty one), checked at every step.
template <class Range>
auto checked_product(const Range& values, const std::string& what, const std::string& fix = "") {
  using T = std::remove_cv_t<std::remove_reference_t<decltype(*std::begin(values))>>;
  T r = 1;
  for (T v : values) r = checked_mul<T>(r, v, what, fix);
  return r;
}

}  // namespace lt
