// The CUDA caching allocator's policy, written apart from cudaMalloc so that the same code
// serves a GPU (segments from cudaMalloc) and the meta device (segments at fake addresses):
// a dry-run then predicts a GPU run's reserved bytes and OOMs exactly.
//
// Semantics follow PyTorch's c10 CUDA caching allocator, which users know:
//  - requests are rounded to 512 bytes (by the Allocator base);
//  - small pool: blocks <= 1 MiB, carved from 2 MiB segments;
//  - large pool: blocks < 10 MiB come from 20 MiB segments, larger ones from segments
//    rounded up to 2 MiB;
//  - best fit by (stream, size, position); a found block is split when the rest is worth
//    keeping (small: >= 512 B, large: > 1 MiB), otherwise the whole block is handed out and
//    counted as allocated (as PyTorch counts it);
//  - a freed block merges with free neighbours of its segment and goes back to its pool;
//  - when a new segment cannot be mapped, every wholly free cached segment is released and
//    the mapping is retried once (num_alloc_retries); if that fails too, it is an OOM.
// One deliberate difference: ties between equal-size free blocks are broken by (segment
// creation order, offset) rather than by raw device address, so the choice never depends on
// where cudaMalloc happened to place a segment, and meta and GPU make the same choices.
#pragma once
#include <cstdint>
#include <memory>
#include <set>
#include <vector>

#include "leantrain/memory.h"

namespace lt {

inline constexpr int64_t kSmallBlockMax = 1 << 20;       // <= this: small pool
inline constexpr int64_t kSmallSegment = 2 << 20;        // segment size of the small pool
inline constexpr int64_t kLargeSegment = 20 << 20;       // segment size for large blocks < 10 MiB
inline constexpr int64_t kMinLargeAlloc = 10 << 20;      // >= this: a segment of its own size
inline constexpr int64_t kLargeRounding = 2 << 20;       // rounding of such segments
inline constexpr int64_t kMinBlockSize = 512;

// Where segments come from: cudaMalloc/cudaFree on a GPU, a fake address range on meta.
class SegmentSource {
 public:
  virtual ~SegmentSource() = default;
  // Maps `bytes`; returns false (and changes nothing) when the device has no room.
  // `ptr` is the usable pointer (nullptr on meta), `addr` the address shown in stats.
  virtual bool map(int64_t bytes, void*& ptr, uint64_t& addr) = 0;
  virtual void unmap(void* ptr, uint64_t addr, int64_t bytes) = 0;
};

// Fake segments for the meta device: increasing addresses, an optional capacity (<0: none)
// standing for the GPU memory free to the run.
class FakeSegmentSource final : public SegmentSource {
 public:
  explicit FakeSegmentSource(int64_t capacity = -1) : capacity_(capacity) {}
  bool map(int64_t bytes, void*& ptr, uint64_t& addr) override;
  void unmap(void* ptr, uint64_t addr, int64_t bytes) override;
  int64_t mapped() const { return mapped_; }

 private:
  int64_t capacity_;
  int64_t mapped_ = 0;
  uint64_t next_addr_ = 0x7f0000000000ull;
};

// The stream whose pool serves this thread's allocations (0: the compute stream). Code that
// allocates for a side stream (H2D copies of the data loader) sets it, so that a block is only
// ever reused on the stream it was allocated for, without cross-stream synchronisation.
int current_alloc_stream();
class AllocStreamScope {
 public:
  explicit AllocStreamScope(int stream);
  ~AllocStreamScope();
  AllocStreamScope(const AllocStreamScope&) = delete;
  AllocStreamScope& operator=(const AllocStreamScope&) = delete;

 private:
  int prev_;
};

// Size of the segment mapped for a block of `size` bytes (already 512-rounded).
int64_t caching_segment_size(int64_t size);

// One segment's layout, for snapshots and tests.
struct SegmentInfo {
  uint64_t addr = 0;
  int64_t size = 0;
  int stream = 0;
  bool small = false;
  int64_t allocated = 0;             // bytes in allocated blocks
  std::vector<int64_t> block_sizes;  // in address order
  std::vector<bool> block_allocated;
};

class CachingAllocator : public Allocator {
 public:
  CachingAllocator(Device d, std::unique_ptr<SegmentSource> source);
  ~CachingAllocator() override;

  // Releases every cached segment that holds no allocated block.
  void empty_cache() override;
  std::vector<SegmentInfo> segments() const;
  int64_t cached_free_bytes() const;  // reserved but not allocated (includes split remainders)
  SegmentSource& source() { return *source_; }

 protected:
  bool do_allocate(Block& b) override;
  void do_free(const Block& b) override;

 private:
  struct Segment;
  struct CBlock {
    Segment* seg = nullptr;
    int64_t offset = 0, size = 0;
    bool allocated = false;
    CBlock* prev = nullptr;  // neighbours within the segment, by address
    CBlock* next = nullptr;
  };
  struct Segment {
    uint64_t id = 0, addr = 0;
    void* ptr = nullptr;
    int64_t size = 0;
    int stream = 0;
    bool small = false;
    CBlock* head = nullptr;  // the block at offset 0 (never deleted: merges keep the lower block)
  };
  // Best-fit order: stream, then size, then segment creation order, then offset.
  struct Order {
    bool operator()(const CBlock* a, const CBlock* b) const;
  };
  using Pool = std::set<CBlock*, Order>;

  CBlock* find_free(Pool& pool, int stream, int64_t size);
  CBlock* map_segment(int stream, int64_t size, bool small);
  void release_cached();  // both pools; caller holds mu_
  void release_segment(CBlock* whole);
  Pool& pool_for(bool small) { return small ? small_pool_ : large_pool_; }

  std::unique_ptr<SegmentSource> source_;
  Pool small_pool_, large_pool_;
  std::vector<Segment*> segments_;  // live segments, in creation order
  uint64_t next_segment_id_ = 0;
};

}  // namespace lt
