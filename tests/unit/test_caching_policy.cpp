// The CUDA caching policy on fake segments: rounding, pools, splitting, reuse, coalescing,
// per-stream pools, retry-then-OOM, empty_cache, and reserved bytes for a hand-worked sequence.
#include <gtest/gtest.h>

#include "leantrain/error.h"
#include "memory/caching_policy.h"
#include "memory/host_allocators.h"

namespace lt {
namespace {

constexpr int64_t KiB = 1024, MiB = 1024 * 1024;

struct Fixture {
  CachingAllocator a{Device::meta(), std::make_unique<FakeSegmentSource>()};
  int64_t reserved() const { return a.stats().reserved_bytes.current; }
  int64_t allocated() const { return a.stats().allocated_bytes.current; }
};

TEST(CachingPolicy, SegmentSizes) {
  EXPECT_EQ(caching_segment_size(512), 2 * MiB);
  EXPECT_EQ(caching_segment_size(MiB), 2 * MiB);
  EXPECT_EQ(caching_segment_size(MiB + 512), 20 * MiB);
  EXPECT_EQ(caching_segment_size(10 * MiB - 512), 20 * MiB);
  EXPECT_EQ(caching_segment_size(10 * MiB), 10 * MiB);
  EXPECT_EQ(caching_segment_size(11 * MiB + 512), 12 * MiB);
}

TEST(CachingPolicy, RoundingAndSmallPool) {
  Fixture f;
  Block b1 = f.a.allocate(1);
  Block b2 = f.a.allocate(513);
  EXPECT_EQ(b1.size, 512);
  EXPECT_EQ(b2.size, 1024);
  EXPECT_EQ(b2.addr, b1.addr + 512);  // carved from the same 2 MiB segment
  EXPECT_EQ(f.reserved(), 2 * MiB);
  EXPECT_EQ(f.allocated(), 1536);
  Block b3 = f.a.allocate(MiB);  // 1 MiB is still small and fits in the first segment
  EXPECT_EQ(f.reserved(), 2 * MiB);
  Block b4 = f.a.allocate(MiB);  // no longer fits: a second small segment
  EXPECT_EQ(f.reserved(), 4 * MiB);
  EXPECT_EQ(f.a.stats().num_segments, 2);
  for (const Block& b : {b1, b2, b3, b4}) f.a.deallocate(b);
  EXPECT_EQ(f.allocated(), 0);
  EXPECT_EQ(f.reserved(), 4 * MiB);  // cached
  Block b5 = f.a.allocate(MiB + 1);  // large pool: its own 20 MiB segment
  EXPECT_EQ(f.reserved(), 24 * MiB);
  f.a.deallocate(b5);
}

TEST(CachingPolicy, LargePoolSplitAndReuse) {
  Fixture f;
  Block a = f.a.allocate(3 * MiB);  // 20 MiB segment: 3 + 17 free
  EXPECT_EQ(f.reserved(), 20 * MiB);
  Block b = f.a.allocate(5 * MiB);  // reuses the 17 MiB remainder: 3 + 5 + 12 free
  EXPECT_EQ(f.reserved(), 20 * MiB);
  EXPECT_EQ(b.addr, a.addr + 3 * MiB);
  auto segs = f.a.segments();
  ASSERT_EQ(segs.size(), 1u);
  EXPECT_EQ(segs[0].block_sizes, (std::vector<int64_t>{3 * MiB, 5 * MiB, 12 * MiB}));
  EXPECT_EQ(segs[0].block_allocated, (std::vector<bool>{true, true, false}));
  // A request >= 10 MiB looks in the pool first: 11 MiB takes the 12 MiB block whole
  // (a 1 MiB remainder is not split off) and counts 12 MiB as allocated.
  Block c = f.a.allocate(11 * MiB);
  EXPECT_EQ(c.size, 12 * MiB);
  EXPECT_EQ(f.reserved(), 20 * MiB);
  EXPECT_EQ(f.allocated(), 20 * MiB);
  for (const Block& x : {a, b, c}) f.a.deallocate(x);
}

TEST(CachingPolicy, OwnSegmentForHugeRequests) {
  Fixture f;
  Block a = f.a.allocate(10 * MiB);
  EXPECT_EQ(f.reserved(), 10 * MiB);
  EXPECT_EQ(a.size, 10 * MiB);
  Block b = f.a.allocate(30 * MiB + 1);  // 32 MiB segment; the 2 MiB - 512 rest is split off
  EXPECT_EQ(b.size, 30 * MiB + 512);
  EXPECT_EQ(f.reserved(), 42 * MiB);
  f.a.deallocate(a);
  f.a.deallocate(b);
}

TEST(CachingPolicy, BestFitPicksSmallestThenEarliest) {
  Fixture f;
  Block x = f.a.allocate(12 * MiB), y = f.a.allocate(16 * MiB), z = f.a.allocate(14 * MiB);
  f.a.deallocate(y);
  f.a.deallocate(z);
  f.a.deallocate(x);
  Block w = f.a.allocate(13 * MiB);  // 14 MiB is the best fit, not the first or largest
  EXPECT_EQ(w.addr, z.addr);
  EXPECT_EQ(w.size, 14 * MiB);  // remainder 1 MiB is not split
  f.a.deallocate(w);
}

TEST(CachingPolicy, CoalescingAndEmptyCache) {
  Fixture f;
  Block a = f.a.allocate(2 * MiB), b = f.a.allocate(2 * MiB), c = f.a.allocate(2 * MiB);
  EXPECT_EQ(f.reserved(), 20 * MiB);
  f.a.deallocate(a);
  f.a.deallocate(c);  // c merges with the 14 MiB tail
  auto segs = f.a.segments();
  ASSERT_EQ(segs.size(), 1u);
  EXPECT_EQ(segs[0].block_sizes, (std::vector<int64_t>{2 * MiB, 2 * MiB, 16 * MiB}));
  f.a.empty_cache();  // b still lives in the segment: nothing to release
  EXPECT_EQ(f.reserved(), 20 * MiB);
  f.a.deallocate(b);  // merges both ways: one free block spanning the segment
  segs = f.a.segments();
  EXPECT_EQ(segs[0].block_sizes, (std::vector<int64_t>{20 * MiB}));
  Block d = f.a.allocate(19 * MiB);  // proves the merge: 19 MiB fits only in the whole segment
  EXPECT_EQ(d.addr, a.addr);
  EXPECT_EQ(f.reserved(), 20 * MiB);
  f.a.deallocate(d);
  f.a.empty_cache();
  EXPECT_EQ(f.reserved(), 0);
  EXPECT_EQ(f.a.stats().num_segments, 0);
}

TEST(CachingPolicy, PerStreamPools) {
  Fixture f;
  Block a = f.a.allocate(4 * KiB);
  f.a.deallocate(a);
  Block b;
  {
    AllocStreamScope s(1);
    b = f.a.allocate(4 * KiB);  // the cached block belongs to stream 0: a new segment
  }
  EXPECT_EQ(b.stream, 1);
  EXPECT_EQ(f.reserved(), 4 * MiB);
  Block c = f.a.allocate(4 * KiB);  // stream 0 reuses its own block
  EXPECT_EQ(c.addr, a.addr);
  f.a.deallocate(b);
  f.a.deallocate(c);
}

TEST(CachingPolicy, RetryThenOom) {
  CachingAllocator a(Device::meta(), std::make_unique<FakeSegmentSource>(24 * MiB));
  Block big = a.allocate(3 * MiB);  // 20 MiB segment
  a.deallocate(big);                // cached
  Block small = a.allocate(KiB);    // 2 MiB segment: 22 of 24 MiB mapped
  Block reuse = a.allocate(5 * MiB);  // from the cached 20 MiB segment, no mapping
  a.deallocate(reuse);
  EXPECT_EQ(a.stats().num_alloc_retries, 0);
  // 21 MiB needs a 22 MiB segment: 44 > 24 MiB, so the cached 20 MiB segment goes first.
  Block x = a.allocate(21 * MiB);
  EXPECT_EQ(a.stats().num_alloc_retries, 1);
  EXPECT_EQ(a.stats().reserved_bytes.current, 24 * MiB);
  EXPECT_EQ(a.stats().num_segments, 2);
  // Nothing left to release: an OOM with the category breakdown, after one more retry.
  {
    MemoryCategoryScope s(Category::Activation);
    try {
      a.allocate(21 * MiB);
      FAIL() << "expected an OutOfMemoryError";
    } catch (const OutOfMemoryError& e) {
      EXPECT_NE(std::string(e.what()).find("by category"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("activation"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(a.stats().num_ooms, 1);
  EXPECT_EQ(a.stats().num_alloc_retries, 2);
  EXPECT_EQ(a.stats().reserved_bytes.current, 24 * MiB);  // the failed request left no trace
  a.deallocate(x);
  a.deallocate(small);
}

TEST(CachingPolicy, LimitActsLikeCapacity) {
  Fixture f;
  f.a.set_limit(20 * MiB);
  Block a = f.a.allocate(5 * MiB);
  EXPECT_THROW(f.a.allocate(2 * KiB), OutOfMemoryError);  // 22 MiB would exceed the cap
  f.a.deallocate(a);
  Block b = f.a.allocate(2 * KiB);  // retry releases the free 20 MiB segment, then fits
  EXPECT_EQ(f.reserved(), 2 * MiB);
  f.a.deallocate(b);
}

// Reserved bytes for a mixed sequence, worked out by hand from the rules above.
void run_sequence(Allocator& al, int64_t& peak_reserved, int64_t& end_reserved, int64_t& end_allocated) {
  Block a = al.allocate(100);           // small segment S1 (2 MiB)                  -> 2
  Block b = al.allocate(600 * KiB);     // S1                                         -> 2
  Block c = al.allocate(3 * MiB / 2);   // large segment L1 (20 MiB): 1.5 + 18.5      -> 22
  Block d = al.allocate(8 * MiB);       // L1: 1.5 + 8 + 10.5 free                    -> 22
  Block e = al.allocate(30 * MiB + 1);  // L2 (32 MiB): 30 MiB+512 + (2 MiB-512) free -> 54
  Block f = al.allocate(700 * KiB);     // S1 has 1447.5 KiB left                     -> 54
  Block g = al.allocate(MiB);           // S1 has 747.5 KiB left: S2 (2 MiB)          -> 56
  al.deallocate(c);                     // L1: 1.5 free + 8 + 10.5 free
  Block h = al.allocate(11 * MiB);      // no free block >= 11 MiB: L3 (12 MiB), whole -> 68
  al.deallocate(d);                     // L1 merges into one free 20 MiB block
  al.empty_cache();                     // releases L1                                -> 48
  peak_reserved = al.stats().reserved_bytes.peak;
  end_reserved = al.stats().reserved_bytes.current;
  end_allocated = al.stats().allocated_bytes.current;
  for (const Block& x : {a, b, e, f, g, h}) al.deallocate(x);
}

TEST(CachingPolicy, ReservedBytesOfASequence) {
  const int64_t expect_alloc = 512 + 600 * KiB + (30 * MiB + 512) + 700 * KiB + MiB + 12 * MiB;
  Fixture f;
  int64_t peak, end, alloc;
  run_sequence(f.a, peak, end, alloc);
  EXPECT_EQ(peak, 68 * MiB);
  EXPECT_EQ(end, 48 * MiB);
  EXPECT_EQ(alloc, expect_alloc);
  // The meta variant the planner uses runs the same policy.
  auto sim = make_simulated_cuda_allocator();
  EXPECT_EQ(sim->device(), Device::meta());
  run_sequence(*sim, peak, end, alloc);
  EXPECT_EQ(peak, 68 * MiB);
  EXPECT_EQ(end, 48 * MiB);
  EXPECT_EQ(alloc, expect_alloc);
}

TEST(CachingPolicy, HistoryRecordsBlockAndSegmentSizes) {
  Fixture f;
  f.a.set_history(true);
  Block x = f.a.allocate(11 * MiB);
  f.a.deallocate(x);
  f.a.empty_cache();
  auto h = f.a.history();
  ASSERT_EQ(h.size(), 4u);
  EXPECT_EQ(h[0].action, MemoryEvent::Action::SegmentAlloc);
  EXPECT_EQ(h[0].size, 12 * MiB);
  EXPECT_EQ(h[1].action, MemoryEvent::Action::Alloc);
  EXPECT_EQ(h[1].size, 12 * MiB);
  EXPECT_EQ(h[1].requested, 11 * MiB);
  EXPECT_EQ(h[2].action, MemoryEvent::Action::Free);
  EXPECT_EQ(h[3].action, MemoryEvent::Action::SegmentFree);
}

}  // namespace
}  // namespace lt
