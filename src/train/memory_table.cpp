// The end-of-run memory table, laid out like torch.cuda.memory_summary so users can compare:
// totals first (allocated, reserved, requested), then allocated bytes split by owner.
// Category peaks are each category's own peak, so they need not add up to the total peak.
// Below them, the pinned-host account (the memory kind the data loader stages batches in).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "leantrain/train.h"
#include "leantrain/memory.h"

namespace lt {

std::string format_duration(double s) {
  char buf[64];
  if (!std::isfinite(s) || s < 0) return "?";
  if (s < 60) std::snprintf(buf, sizeof buf, "%.1fs", s);
  else if (s < 3600) std::snprintf(buf, sizeof buf, "%dm%02ds", int(s) / 60, int(s) % 60);
  else std::snprintf(buf, sizeof buf, "%dh%02dm", int(s) / 3600, int(s) % 3600 / 60);
  return buf;
}

namespace {

constexpr int kWidth = 65;  // inner width between the outer bars

std::string rule(char c) { return "|" + std::string(kWidth, c) + "|\n"; }

std::string row(const std::string& name, const std::string& cur, const std::string& peak) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "| %-30s| %14s | %14s |\n", name.c_str(), cur.c_str(), peak.c_str());
  return buf;
}

std::string centered(const std::string& text) {
  int pad = std::max(0, kWidth - int(text.size()));
  return "|" + std::string(pad / 2, ' ') + text + std::string(pad - pad / 2, ' ') + "|\n";
}

}  // namespace

namespace {

// The table up to its closing rule: title, the device's totals, categories and counts.
std::string device_rows(Device d, const MemoryStats& s) {
  std::string out = rule('=');
  out += centered("leantrain memory summary, device " + d.str());
  out += rule('=');
  out += row("Metric", "Current", "Peak");
  out += rule('-');
  out += row("Allocated memory", format_bytes(s.allocated_bytes.current), format_bytes(s.allocated_bytes.peak));
  out += row("Reserved memory", format_bytes(s.reserved_bytes.current), format_bytes(s.reserved_bytes.peak));
  out += row("Requested memory", format_bytes(s.requested_bytes.current), format_bytes(s.requested_bytes.peak));
  out += row("Cached, not allocated",
             format_bytes(s.reserved_bytes.current - s.allocated_bytes.current), "");
  out += rule('-');
  for (int i = 0; i < kNumCategories; ++i)
    out += row(std::string("  ") + category_name(Category(i)), format_bytes(s.category[i].current),
               format_bytes(s.category[i].peak));
  out += rule('-');
  char buf[160];
  std::snprintf(buf, sizeof buf, " allocs %lld, frees %lld, segments %lld, retries %lld, OOMs %lld",
                (long long)s.num_allocs, (long long)s.num_frees, (long long)s.num_segments,
                (long long)s.num_alloc_retries, (long long)s.num_ooms);
  std::string line = buf;
  line.resize(kWidth, ' ');
  out += "|" + line + "|\n";
  return out;
}

}  // namespace

std::string memory_summary(Device d) {
  return memory_summary(d, allocator_for(d).stats(), pinned_host_allocator(d).stats());
}

std::string memory_summary(Device d, const MemoryStats& s) { return device_rows(d, s) + rule('='); }

// Page-locked on CUDA; on cpu the same buffers are ordinary memory, counted all the same.
std::string memory_summary(Device d, const MemoryStats& s, const MemoryStats& h, const MemoryStats* disk) {
  std::string out = device_rows(d, s) + rule('-');
  auto account = [&](const char* title, const MemoryStats& a) {
    out += row(title, format_bytes(a.allocated_bytes.current), format_bytes(a.allocated_bytes.peak));
    for (int i = 0; i < kNumCategories; ++i)
      if (a.category[i].peak)
        out += row(std::string("  ") + category_name(Category(i)), format_bytes(a.category[i].current),
                   format_bytes(a.category[i].peak));
  };
  account(d.is_cuda() ? "Pinned host memory" : "Pinned host memory (ordinary)", h);
  if (disk && disk->allocated_bytes.peak > 0) {
    out += rule('-');
    account("Disk (--offload-dir)", *disk);
  }
  return out + rule('=');
}

}  // namespace lt
