#include "memory/memory_timeline.h"

#include <algorithm>

namespace lt {

namespace {

using Action = MemoryEvent::Action;
using Split = std::array<int64_t, kNumCategories>;

// Applies one event to the running state (or undoes it, with sign -1).
void apply(const MemoryEvent& e, int sign, Split& cat, int64_t& reserved) {
  switch (e.action) {
    case Action::Alloc: cat[size_t(e.category)] += sign * e.size; break;
    case Action::Free: cat[size_t(e.category)] -= sign * e.size; break;
    case Action::Retag:
      cat[size_t(e.from)] -= sign * e.size;
      cat[size_t(e.category)] += sign * e.size;
      break;
    case Action::SegmentAlloc: reserved += sign * e.size; break;
    case Action::SegmentFree: reserved -= sign * e.size; break;
    case Action::Oom: break;
  }
}

}  // namespace

MemoryTimeline build_memory_timeline(const std::vector<MemoryEvent>& h, const MemoryStats& now, size_t max_points) {
  MemoryTimeline t;
  t.states = h.size() + 1;
  max_points = std::max<size_t>(max_points, 1);

  // The starting state: today's counts with every recorded event undone.
  Split cat{};
  for (int c = 0; c < kNumCategories; ++c) cat[size_t(c)] = now.category[size_t(c)].current;
  int64_t reserved = now.reserved_bytes.current;
  for (size_t i = h.size(); i-- > 0;) apply(h[i], -1, cat, reserved);

  const size_t npoints = std::min<size_t>(t.states, max_points);
  t.points.resize(npoints);
  auto bucket = [&](uint64_t s) { return size_t(s * npoints / t.states); };  // states < 2^40 in practice
  for (uint64_t s = 0; s < t.states; ++s) {
    if (s > 0) {
      const MemoryEvent& e = h[s - 1];
      apply(e, +1, cat, reserved);
      if (e.action == Action::Oom) t.oom_states.push_back(s);
    }
    int64_t total = 0;
    for (int c = 0; c < kNumCategories; ++c) {
      const int64_t v = cat[size_t(c)];
      if (v < 0) t.consistent = false;
      total += v;
      t.category_max[size_t(c)] = std::max(t.category_max[size_t(c)], v);
    }
    if (reserved < 0) t.consistent = false;
    t.reserved_max = std::max(t.reserved_max, reserved);
    const char* op = s > 0 ? h[s - 1].op : "";
    const size_t b = bucket(s);
    TimelinePoint& p = t.points[b];
    const bool first_in_bucket = s == 0 || bucket(s - 1) != b;
    if (first_in_bucket) {
      p.first = s;
      p.reserved = reserved;
    }
    p.last = s;
    p.reserved = std::max(p.reserved, reserved);
    if (first_in_bucket || total > p.total()) {
      p.state = s;
      p.bytes = cat;
      p.op = op;
    }
    if (s == 0 || total > t.peak_allocated) {
      t.peak_allocated = total;
      t.peak_state = s;
      t.peak_point = b;
      t.peak_op = op;
      t.at_peak = cat;
    }
  }
  return t;
}

}  // namespace lt
