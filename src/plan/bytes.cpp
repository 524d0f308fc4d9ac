// Byte sizes on the command line: --budget 8GiB, --context-bytes 529MiB.
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "leantrain/plan.h"

namespace lt {

int64_t parse_bytes(const std::string& text, const std::string& flag) {
  auto bad = [&]() -> int64_t {
    throw UsageError(flag + " " + text + ": not a size", "sizes are a number with an optional unit",
                     "write e.g. " + flag + " 8GiB, 8GB or 512MiB");
  };
  const char* p = text.c_str();
  char* end = nullptr;
  double v = std::strtod(p, &end);
  if (end == p || !std::isfinite(v) || v < 0) return bad();
  std::string unit;
  for (const char* q = end; *q; ++q)
    if (!std::isspace(static_cast<unsigned char>(*q))) unit += char(std::tolower(static_cast<unsigned char>(*q)));
  double mult = 1;
  if (unit.empty() || unit == "b") mult = 1;
  else if (unit == "k" || unit == "kib") mult = 1024.0;
  else if (unit == "m" || unit == "mib") mult = 1024.0 * 1024;
  else if (unit == "g" || unit == "gib") mult = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tib") mult = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "p" || unit == "pib") mult = 1024.0 * 1024 * 1024 * 1024 * 1024;  // known, so the range check names it
  else if (unit == "pb") mult = 1e15;
  else if (unit == "kb") mult = 1e3;
  else if (unit == "mb") mult = 1e6;
  else if (unit == "gb") mult = 1e9;
  else if (unit == "tb") mult = 1e12;
  else return bad();
  // Far above any device's memory, far below where the sums the planner forms could overflow.
  constexpr double kMax = double(int64_t(1) << 50);
  const double bytes = v * mult;
  if (!(bytes <= kMax))
    throw UsageError(flag + " " + text + " is out of range", "a memory size here is at most 1 PiB (1048576 GiB)",
                     "write e.g. " + flag + " 80GiB");
  return int64_t(std::llround(bytes));
}

}  // namespace lt
