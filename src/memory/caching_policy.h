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
//  - a freed block merges with free neighbours of its segment and goes back to its pool; one
//    that another stream used first waits for that stream (Note [Cross-stream reuse]);
//  - when a new segment cannot be mapped, every wholly free cached segment is released and
//    the mapping is retried once (num_alloc_retries); if that fails too, it is an OOM.
// One deliberate difference: ties between equal-size free blocks are broken by (segment
// creation order, offset) rather than by raw device address, so the choice never depends on
// where cudaMalloc happened to place a segment, and meta and GPU make the same choices.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "leantrain/memory.h"
#include "memory/streams.h"

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

// Size of the segment mapped for a block of `size` bytes (already 512-rounded).
int64_t caching_segment_size(int64_t size);

// Note [Cross-stream reuse]
// A block belongs to the pool of the stream it was allocated for, and is handed out again only
// for that stream: work on one stream runs in order, so a freed block is safe to reuse there
// without any synchronisation. When another stream also uses the block (a copy stream reading
// it, later a communication stream), the code says so with record_stream(block, stream), as in
// PyTorch. Freeing such a block records an event on every stream that used it, and the block
// waits, outside the pools, until its reuse is safe. PyTorch polls those events
// (cudaEventQuery) at every allocation; that answer depends on timing, which meta cannot
// replay, so here the decision is made from program order only:
//
//  1. At every allocation, a waiting block goes back to its pool once its allocation stream is
//     ordered after every such event: some code made that stream wait (Event::block_current_stream,
//     cudaStreamWaitEvent) for an event recorded on the using stream no earlier than the free.
//     Work enqueued from then on runs after the use, on the GPU as on meta (StreamOrder).
//  2. When the block is needed, it is waited for: when a new segment cannot be mapped (before
//     the cached segments are released and the mapping retried) and in empty_cache(), every
//     waiting block's events are synchronised (cudaEventSynchronize; nothing to wait for on
//     meta) and the blocks go back to their pools.
//
// Nothing else counts: not an event that happens to have completed, not a host wait on one
// (the data loader waits only when a poll says "not yet"), not a device synchronize (run.cpp
// used to synchronise after every step, plan_run never did). So the same program makes the same
// decisions on both devices, and `leantrain plan` stays exact to the byte. Code that
// makes a stream wait must not make that wait depend on timing. A run that never calls
// record_stream has no waiting blocks, and the policy is the single-stream one.

// The events of waiting blocks. The policy asks `orders_after` (rule 1) and `synchronize`
// (rule 2); OrderedStreamEvents answers from the allocator's StreamOrder (meta), the CUDA
// allocator also records and waits for real events, tests substitute their own.
class StreamEvents {
 public:
  virtual ~StreamEvents() = default;
  // Records an event on `stream` after the work enqueued on it so far; returns its id.
  virtual uint64_t record(int stream) = 0;
  // Whether work enqueued on `stream` from now on runs after the event. Must depend on program
  // order only (see the Note).
  virtual bool orders_after(uint64_t event, int stream) = 0;
  // The host waits until the event has completed.
  virtual void synchronize(uint64_t event) = 0;
  virtual void release(uint64_t event) = 0;  // the event is no longer needed
};

class OrderedStreamEvents : public StreamEvents {
 public:
  explicit OrderedStreamEvents(StreamOrder& order) : order_(order) {}
  uint64_t record(int stream) override;
  bool orders_after(uint64_t event, int stream) override;
  void synchronize(uint64_t) override {}
  void release(uint64_t event) override;

 protected:
  StreamOrder& order_;
  std::map<uint64_t, StreamMark> marks_;
  uint64_t next_id_ = 0;
};

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

  // --- streams (Note [Cross-stream reuse]) ---
  // The live block `b` of this allocator is also used by `stream`.
  void record_stream(const Block& b, int stream);
  // The program's stream order, reported by Event (backend/event.h): an event recorded on
  // `stream`, and `stream` made to wait for one.
  StreamMark note_event(int stream);
  void note_stream_wait(int stream, const StreamMark& m);
  // Replaces the default OrderedStreamEvents (the CUDA allocator, tests). No block may be waiting.
  void set_stream_events(std::unique_ptr<StreamEvents> events);
  StreamOrder& stream_order() { return order_; }
  int64_t waiting_bytes() const;  // freed blocks waiting for another stream (in no pool yet)
  // A hash of the layout: every segment (creation order, size, stream, pool) and its blocks
  // (offset, size, allocated or free or waiting, the streams that used it). Two moments with the
  // same fingerprint make the same choices for the same requests from then on; plan_run steps
  // until a step boundary repeats an earlier one.
  uint64_t layout_fingerprint() const;

 protected:
  bool do_allocate(Block& b) override;
  void do_free(const Block& b) override;

 private:
  struct Segment;
  struct CBlock {
    Segment* seg = nullptr;
    int64_t offset = 0, size = 0;
    bool allocated = false;
    bool waiting = false;      // freed, waiting for other streams' events (Note [Cross-stream reuse])
    uint32_t stream_uses = 0;  // bit s: stream s (not the segment's) used the block
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
  struct Waiting {
    CBlock* block;
    std::vector<uint64_t> events;  // one per stream that used it
  };

  CBlock* find_free(Pool& pool, int stream, int64_t size);
  CBlock* map_segment(int stream, int64_t size, bool small);
  void release_cached();  // both pools; caller holds mu_
  void release_segment(CBlock* whole);
  void to_pool(CBlock* blk);     // merges with free neighbours, then into its pool
  void reuse_ordered_waiting();  // rule 1 of the Note
  void synchronize_waiting();    // rule 2
  Pool& pool_for(bool small) { return small ? small_pool_ : large_pool_; }

  std::unique_ptr<SegmentSource> source_;
  Pool small_pool_, large_pool_;
  std::vector<Segment*> segments_;  // live segments, in creation order
  uint64_t next_segment_id_ = 0;
  StreamOrder order_;
  std::unique_ptr<StreamEvents> events_;
  std::vector<Waiting> waiting_;  // in the order they were freed
};

// The caching allocator behind `a`, or nullptr: the CPU allocator and the plain meta allocator
// keep no freed block, so streams do not concern them.
inline CachingAllocator* as_caching(Allocator& a) { return dynamic_cast<CachingAllocator*>(&a); }

}  // namespace lt
