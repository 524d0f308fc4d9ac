// Numeric flags parsed here rather than by CLI11, which turns an integer that does not fit into
// INT64_MAX (--steps 99999999999999999999 trained "forever"), reads 010 as octal, 0x10 as hex and
// -1 as a huge unsigned. A value is decimal (an exponent is fine when the number is whole: 1e6),
// and outside its flag's range it is one UsageError naming the flag, the range and the unit.
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <type_traits>

#include "cli/cli.h"
#include "io/text_format.h"

namespace lt::cli {

namespace {

// Digits, a sign, a point and an exponent: what a decimal number is written with (no "0x", "inf").
bool decimal_chars(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.' || c == 'e' || c == 'E')) return false;
  return true;
}

// The whole of `s` as a T (long double for integers with an exponent, double for reals, rounded
// once from the decimal text), or nullopt when it is not a decimal number. A value that does not
// fit comes back as +-inf: out of range, as it should read.
template <class T>
std::optional<T> to_real(const std::string& s) {
  if (!decimal_chars(s)) return std::nullopt;
  char* end = nullptr;
  const T v = std::is_same_v<T, double> ? std::strtod(s.c_str(), &end) : std::strtold(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return std::nullopt;
  return v;
}

[[noreturn]] void refuse(const std::string& flag, const std::string& text, const std::string& is,
                         const std::string& why, const std::string& fix = "pass a value in that range") {
  throw UsageError(flag + " " + text + " " + is, why, fix);
}

}  // namespace

int64_t parse_int_flag(const IntRange& r, const std::string& text) {
  const std::string digits = !text.empty() && text[0] == '+' ? text.substr(1) : text;
  int64_t v = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (!digits.empty() && end == digits.data() + digits.size() && ec != std::errc::invalid_argument) {
    if (ec == std::errc::result_out_of_range || v < r.lo || v > r.hi)
      refuse(r.flag, text, "is out of range", range_str(r));
    return v;
  }
  // Not plain digits: a whole number with an exponent (2e5) still counts.
  const std::optional<long double> x = to_real<long double>(text);
  if (!x || (std::isfinite(*x) && *x != std::floor(*x))) refuse(r.flag, text, "is not a whole number", range_str(r));
  if (!std::isfinite(*x) || *x < (long double)r.lo || *x > (long double)r.hi)
    refuse(r.flag, text, "is out of range", range_str(r));
  return int64_t(*x);
}

double parse_real_flag(const std::string& flag, const std::string& text, const RealRange* r) {
  const std::optional<double> x = to_real<double>(text);
  if (r) {
    if (!x) refuse(flag, text, "is not a number", range_str(*r));
    if (!(*x >= r->lo && *x <= r->hi)) refuse(flag, text, "is out of range", range_str(*r));
    return *x;
  }
  const std::string fix = "pass a finite number, e.g. " + flag + " 0.5";
  if (!x) refuse(flag, text, "is not a number", flag + " takes a finite decimal number such as 0.5 or 3e-4", fix);
  const double v = *x;
  if (!std::isfinite(v)) refuse(flag, text, "is out of range", "it does not fit a 64-bit floating-point number", fix);
  return v;
}

uint64_t parse_seed_flag(const std::string& flag, const std::string& text) {
  const std::string range = flag + " takes 0 to " + std::to_string(std::numeric_limits<uint64_t>::max());
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  const bool negative = text.size() > 1 && text[0] == '-' && text.find_first_not_of("0123456789", 1) == std::string::npos;
  if (negative || ec == std::errc::result_out_of_range) refuse(flag, text, "is out of range", range);
  if (text.empty() || end != text.data() + text.size()) refuse(flag, text, "is not a whole number", range);
  return v;
}

CLI::Option* add_int_flag(CLI::App& cmd, const IntRange& r, int64_t& target, const std::string& help) {
  return cmd
      .add_option_function<std::string>(
          r.flag, [&target, r](const std::string& s) { target = parse_int_flag(r, s); }, help)
      ->default_function([&target] { return std::to_string(target); })
      ->type_name("INT");
}

CLI::Option* add_real_flag(CLI::App& cmd, const std::string& flag, double& target, const std::string& help,
                           const RealRange* r) {
  return cmd
      .add_option_function<std::string>(
          flag, [&target, flag, r](const std::string& s) { target = parse_real_flag(flag, s, r); }, help)
      ->default_function([&target] { return short_number(target); })
      ->type_name("FLOAT");
}

CLI::Option* add_seed_flag(CLI::App& cmd, uint64_t& target, const std::string& help) {
  return cmd
      .add_option_function<std::string>(
          "--seed", [&target](const std::string& s) { target = parse_seed_flag("--seed", s); }, help)
      ->default_function([&target] { return std::to_string(target); })
      ->type_name("UINT");
}

}  // namespace lt::cli
