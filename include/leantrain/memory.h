// Memory accounting. Every device byte has an owner: each allocation is tagged with the
// category of the innermost MemoryCategoryScope, so no call site passes it by hand.
// The categories always add up to allocated bytes; reserved - allocated is fragmentation.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "leantrain/device.h"

namespace lt {

enum class Category : uint8_t { Parameter, Gradient, OptimizerState, Activation, Input, Workspace, Other };
inline constexpr int kNumCategories = 7;
const char* category_name(Category c);  // "parameter", "gradient", "optimizer_state", ...

Category current_category();
class MemoryCategoryScope {
 public:
  explicit MemoryCategoryScope(Category c);
  ~MemoryCategoryScope();
  MemoryCategoryScope(const MemoryCategoryScope&) = delete;
  MemoryCategoryScope& operator=(const MemoryCategoryScope&) = delete;

 private:
  Category prev_;
};

// The op on whose behalf memory is being allocated (recorded in the history). Op front-ends set it.
const char* current_op();
class OpNameScope {
 public:
  explicit OpNameScope(const char* name);
  ~OpNameScope();

 private:
  const char* prev_;
};

// Where bytes live (docs/memory-model.md, "Memory kinds"). Each kind has its own allocators,
// each with the seven categories, current and peak. Disk: the extents of --offload-dir's state
// file (an account of bytes, no memory behind it).
enum class MemoryKind : uint8_t { Device, PinnedHost, Disk };
const char* memory_kind_name(MemoryKind k);  // "device", "pinned host", "disk"

// A counter with its peak, and the running totals of what went in and out.
struct Stat {
  int64_t current = 0, peak = 0, allocated = 0, freed = 0;
  void increase(int64_t n) {
    current += n;
    allocated += n;
    if (current > peak) peak = current;
  }
  void decrease(int64_t n) {
    current -= n;
    freed += n;
  }
  void reset_peak() { peak = current; }
};

// Names follow PyTorch's CUDA allocator stats so users can compare.
struct MemoryStats {
  Stat allocated_bytes;   // live blocks, as rounded by the allocator
  Stat reserved_bytes;    // segments held from the device
  Stat requested_bytes;   // live blocks, as requested
  std::array<Stat, kNumCategories> category{};  // allocated_bytes split by owner
  int64_t num_allocs = 0, num_frees = 0, num_segments = 0;
  int64_t num_alloc_retries = 0, num_ooms = 0;
};

// One entry of the allocation history (memory snapshots, the trace-equality test).
// Retag moves a live block's bytes from `from` to `category` (no memory changes hands).
struct MemoryEvent {
  enum class Action : uint8_t { Alloc, Free, SegmentAlloc, SegmentFree, Oom, Retag };
  Action action;
  uint64_t addr;
  int64_t size;       // rounded (segment size for segment events)
  int64_t requested;  // as asked
  Category category;
  int stream;
  const char* op;     // static string
  uint64_t seq = 0;      // this allocator's event counter: increases by one per recorded event
  int64_t time_us = 0;   // steady clock, microseconds since the process first recorded an event
  Category from = Category::Other;  // Retag only: the category the bytes left
};
inline constexpr size_t kDefaultHistoryEntries = size_t(1) << 20;  // ~64 MiB of events

// A block in use, with who asked for it (memory snapshots list these per segment).
struct LiveBlock {
  uint64_t addr = 0;
  int64_t size = 0, requested = 0;
  Category category = Category::Other;
  int stream = 0;
  const char* op = "";  // the op that allocated it
};
const char* action_name(MemoryEvent::Action a);

struct Block {
  void* ptr = nullptr;   // host-usable pointer (CPU), device pointer (CUDA), nullptr (meta)
  uint64_t addr = 0;     // the address reported in stats/history (fake on meta)
  int64_t size = 0;      // rounded
  int64_t requested = 0;
  Category category = Category::Other;
  int stream = 0;
  void* handle = nullptr;  // allocator-private
};

// 512-byte rounding, as the CUDA caching allocator does (and the CPU allocator, so traces match).
inline int64_t round_allocation(int64_t n) { return n <= 0 ? 512 : (n + 511) / 512 * 512; }

class Allocator {
 public:
  // `d`: the device whose memory this is, or, for a pinned-host account, the device it serves.
  explicit Allocator(Device d, MemoryKind kind = MemoryKind::Device) : device_(d), kind_(kind) {}
  virtual ~Allocator() = default;

  // Category comes from the current scope. Throws OutOfMemoryError with a breakdown.
  Block allocate(int64_t nbytes);
  void deallocate(const Block& b);
  // Moves a live block's bytes to another category (e.g. a backward temporary becoming a .grad).
  void retag(Block& b, Category to);
  virtual void empty_cache() {}
  // Caps what this allocator may reserve (simulates a smaller device). <0: no cap.
  virtual void set_limit(int64_t bytes) { limit_ = bytes; }
  int64_t limit() const { return limit_; }

  Device device() const { return device_; }
  MemoryKind kind() const { return kind_; }
  MemoryStats stats() const;
  void reset_peak_stats();
  void set_history(bool on);
  bool history_enabled() const { return history_on_; }
  // Oldest first. The history is a ring: past max_entries, each new event drops the oldest,
  // so a long run keeps its most recent events in bounded host memory.
  std::vector<MemoryEvent> history() const;
  void clear_history();
  void set_history_max_entries(size_t n);  // >= 1; default kDefaultHistoryEntries
  size_t history_max_entries() const;
  uint64_t history_dropped() const;  // events dropped by the ring since the last clear_history
  // Every allocated block, in address order (tracked whether or not the history is on).
  std::vector<LiveBlock> live_blocks() const;
  // One-line-per-category breakdown, for OOM errors and the end-of-run table.
  std::string breakdown() const;

 protected:
  // Implementations fill ptr/addr/handle and report segments through note_segment_*.
  // Called with mu_ held. Return false when the device has no room (after any retry).
  virtual bool do_allocate(Block& b) = 0;
  virtual void do_free(const Block& b) = 0;
  void note_segment_alloc(uint64_t addr, int64_t size, int stream = 0);
  void note_segment_free(uint64_t addr, int64_t size, int stream = 0);
  void note_retry() { ++stats_.num_alloc_retries; }

  Device device_;
  MemoryKind kind_;
  MemoryStats stats_;
  int64_t limit_ = -1;
  mutable std::mutex mu_;

 private:
  void record(MemoryEvent::Action a, uint64_t addr, int64_t size, int64_t requested, Category c, int stream,
              Category from = Category::Other);
  bool history_on_ = false;
  std::vector<MemoryEvent> history_;  // ring storage; history_head_ is the oldest once full
  size_t history_head_ = 0, history_max_ = kDefaultHistoryEntries;
  uint64_t history_seq_ = 0, history_dropped_ = 0;
  std::map<uint64_t, LiveBlock> live_;  // by address
};

// The allocator that serves a device. Created on first use.
Allocator& allocator_for(Device d);
// Replaces a device's allocator (the planner points `meta` at a simulated CUDA allocator).
// Only allowed while nothing is allocated on that device.
void set_allocator(Device d, std::unique_ptr<Allocator> a);

// Backing memory of a tensor; frees its block through its allocator when the last view dies.
struct Storage {
  Block block;
  Allocator* allocator = nullptr;  // nullptr: memory not owned (e.g. a caller's buffer)
  Device device;

  Storage(Block b, Allocator* a, Device d) : block(b), allocator(a), device(d) {}
  ~Storage();
  // The bytes the data loader uploaded into this device storage (a batch's token ids and
  // targets), so that range checks and counts read them without waiting for the device. Only
  // for storage nothing writes after the upload; null otherwise.
  std::shared_ptr<const std::vector<char>> host_copy;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return block.ptr; }
  int64_t nbytes() const { return block.requested; }
};

std::shared_ptr<Storage> allocate_storage(int64_t nbytes, Device d);

// The pinned host memory that device d's transfers read from or write to (the data loader's
// staging ring, later offload buffers): page-locked (cudaHostAlloc) on CUDA, ordinary memory on
// cpu and meta, counted the same way on all three, so a dry run predicts a GPU run's pinned peak.
// Created on first use; the planner swaps meta's for a fresh one per dry run.
Allocator& pinned_host_allocator(Device d);
void set_pinned_host_allocator(Device d, std::unique_ptr<Allocator> a);  // nothing allocated on it
// Host memory from d's pinned-host account, tagged with the current category, freed when the last
// owner drops it (its Storage's device is the CPU: it is host memory). nullptr when the system
// refuses to pin more: pinned memory is limited, so callers fall back to pageable memory.
std::shared_ptr<Storage> allocate_pinned_host(int64_t nbytes, Device d);

// The disk account of device d's run: the bytes of --offload-dir's state file, by category. Its
// blocks hold no memory (ptr nullptr); a block's addr is its byte offset in the file (addresses
// start at 0 and are handed out in order, never reused). Counted the same on every device, so a
// dry run predicts a run's disk peak. Created on first use; the planner swaps meta's per dry run.
Allocator& disk_allocator(Device d);
void set_disk_allocator(Device d, std::unique_ptr<Allocator> a);  // nothing allocated on it

}  // namespace lt
