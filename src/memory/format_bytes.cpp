// Sizes as people read them, binary units (the allocator's errors, the memory table, plans).
#include <cmath>
#include <cstdio>

#include "memory/format_bytes.h"

namespace lt {

std::string format_bytes(int64_t b) {
  char buf[64];
  const double v = double(b);
  const double kib = 1024.0, mib = kib * 1024, gib = mib * 1024;
  if (std::fabs(v) >= gib) std::snprintf(buf, sizeof buf, "%.2f GiB", v / gib);
  else if (std::fabs(v) >= mib) std::snprintf(buf, sizeof buf, "%.2f MiB", v / mib);
  else if (std::fabs(v) >= kib) std::snprintf(buf, sizeof buf, "%.1f KiB", v / kib);
  else std::snprintf(buf, sizeof buf, "%lld B", (long long)b);
  return buf;
}

}  // namespace lt
