// Allocated bytes per category and reserved bytes over a recorded history, for the HTML report.
//
// The history may begin mid-run (the ring dropped older events, or recording started late), so
// the state before its first event is reconstructed backwards from the allocator's current stats:
// exact as long as recording stayed on from that first event until the stats were read.
// State 0 is that starting state; state i+1 is the state after event i.
//
// Long histories are downsampled to at most `max_points` points: each point stands for a run of
// consecutive states and shows the one with the most allocated bytes (so no peak is lost) and the
// most reserved bytes of the run.
#pragma once
#include <array>
#include <vector>

#include "leantrain/memory.h"

namespace lt {

struct TimelinePoint {
  uint64_t first = 0, last = 0;  // the states this point stands for
  uint64_t state = 0;            // the state shown (most allocated bytes in [first, last])
  std::array<int64_t, kNumCategories> bytes{};  // allocated bytes per category in that state
  int64_t reserved = 0;          // most reserved bytes in [first, last]
  const char* op = "";           // the op of the event that led to `state`
  int64_t total() const {
    int64_t t = 0;
    for (int64_t b : bytes) t += b;
    return t;
  }
};

struct MemoryTimeline {
  std::vector<TimelinePoint> points;
  uint64_t states = 0;  // history size + 1
  // The exact peak of allocated bytes over all states (never lost to downsampling).
  uint64_t peak_state = 0;
  size_t peak_point = 0;  // the point that shows it
  int64_t peak_allocated = 0;
  const char* peak_op = "";
  std::array<int64_t, kNumCategories> at_peak{};        // the split at that peak
  std::array<int64_t, kNumCategories> category_max{};   // each category's own maximum
  int64_t reserved_max = 0;
  std::vector<uint64_t> oom_states;  // states right after an OOM event
  bool consistent = true;            // false if a reconstructed count went negative
};

MemoryTimeline build_memory_timeline(const std::vector<MemoryEvent>& history, const MemoryStats& now,
                                     size_t max_points = 1000);

}  // namespace lt
