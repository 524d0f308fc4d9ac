#include "train/flag_ranges.h"

#include <cmath>

#include "io/text_format.h"
#include "leantrain/train.h"

namespace lt {

std::string range_str(const IntRange& r) {
  return std::string(r.flag) + " takes " + std::to_string(r.lo) + " to " + std::to_string(r.hi) + " " + r.unit;
}

std::string range_str(const RealRange& r) {
  return std::string(r.flag) + " takes " + short_number(r.lo) + " to " + short_number(r.hi) + " " + r.unit;
}

void check_range(const IntRange& r, int64_t v) {
  if (v < r.lo || v > r.hi)
    throw UsageError(std::string(r.flag) + " " + std::to_string(v) + " is out of range", range_str(r),
                     "pass a value in that range");
}

void check_range(const RealRange& r, double v) {
  if (!(v >= r.lo && v <= r.hi))  // NaN fails both
    throw UsageError(std::string(r.flag) + " " + short_number(v) + " is out of range", range_str(r),
                     "pass a value in that range");
}

}  // namespace lt
