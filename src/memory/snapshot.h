// A memory snapshot: what an allocator holds now (segments and the blocks in them, with the op
// and category that own each block) and what it recorded (the history), captured once and then
// written as JSON or as a pickle in the layout of PyTorch's torch.cuda.memory._snapshot(), which
// pytorch.org/memory_viz and torch/cuda/_memory_viz.py read.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "leantrain/memory.h"

namespace lt {

struct SnapshotBlock {
  uint64_t addr = 0;
  int64_t size = 0, requested = 0;  // requested is 0 for a free block
  bool allocated = false;
  Category category = Category::Other;
  const char* op = "";
};

struct SnapshotSegment {
  uint64_t addr = 0;
  int64_t size = 0;
  int stream = 0;
  bool small = false;                 // PyTorch's small pool (blocks <= 1 MiB)
  std::vector<SnapshotBlock> blocks;  // in address order, covering the whole segment
};

struct MemoryState {
  Device device;
  MemoryStats stats;
  int64_t limit = -1;
  std::vector<SnapshotSegment> segments;  // in address order
  std::vector<MemoryEvent> history;       // oldest first
  uint64_t history_dropped = 0;
};

// The caching allocator's layout as it is; for the CPU and simple meta allocators, which map one
// segment per block, one segment per live block. Take it while no other thread allocates.
MemoryState capture_memory_state(const Allocator& a);

enum class SnapshotFormat { Json, Pickle };
// Streams the snapshot to `sink` in pieces (a few MiB at most at a time).
void write_memory_state(const MemoryState& s, SnapshotFormat f, const std::function<void(const std::string&)>& sink);
std::string memory_snapshot_string(const MemoryState& s, SnapshotFormat f);

}  // namespace lt
