// Streams and events (seam 4): the stream order built from program statements, the caching
// policy's cross-stream reuse (Note [Cross-stream reuse] in memory/caching_policy.h) with a fake
// event source and with the program-order one meta uses, Event and record_stream on meta, and
// on a GPU the same decisions as meta plus data that a too-early reuse would corrupt.
#include <gtest/gtest.h>

#include <map>

#include "backend/backend.h"
#include "backend/event.h"
#include "leantrain/cuda_info.h"
#include "leantrain/error.h"
#include "leantrain/ops.h"
#include "memory/caching_policy.h"
#include "memory/host_allocators.h"

namespace lt {
namespace {

constexpr int64_t KiB = 1024, MiB = 1024 * 1024;

TEST(StreamOrder, OrderComesFromWaitsOnly) {
  StreamOrder o;
  const StreamMark a = o.record(kCopyStream);
  EXPECT_FALSE(o.orders_after(kComputeStream, a));
  EXPECT_TRUE(o.orders_after(kCopyStream, a));  // a stream's own work runs in order
  const StreamMark b = o.record(kCopyStream);   // later work on the copy stream
  o.wait(kComputeStream, a);
  EXPECT_TRUE(o.orders_after(kComputeStream, a));
  EXPECT_FALSE(o.orders_after(kComputeStream, b)) << "waiting for an earlier event orders nothing after it";
  o.wait(kComputeStream, b);
  EXPECT_TRUE(o.orders_after(kComputeStream, b));
  EXPECT_TRUE(o.orders_after(kComputeStream, StreamMark{}));  // never recorded: nothing to wait for
}

TEST(StreamOrder, WaitsAreTransitive) {
  StreamOrder o;
  const StreamMark c = o.record(2);  // a third stream (communication, later)
  o.wait(kCopyStream, c);
  const StreamMark after = o.record(kCopyStream);  // carries what the copy stream had seen
  EXPECT_FALSE(o.orders_after(kComputeStream, c));
  o.wait(kComputeStream, after);
  EXPECT_TRUE(o.orders_after(kComputeStream, c));
  EXPECT_THROW(o.record(kMaxStreams), Error);
  EXPECT_THROW(StreamGuard g(-1), Error);
}

TEST(StreamGuard, SetsTheStreamAndItsPool) {
  EXPECT_EQ(current_stream_id(), kComputeStream);
  {
    StreamGuard g(kCopyStream);
    EXPECT_EQ(current_stream_id(), kCopyStream);
    EXPECT_EQ(current_alloc_stream(), kCopyStream);
    AllocStreamScope pool(kComputeStream);
    EXPECT_EQ(current_stream_id(), kCopyStream);
    EXPECT_EQ(current_alloc_stream(), kComputeStream);
  }
  EXPECT_EQ(current_stream_id(), kComputeStream);
  EXPECT_EQ(current_alloc_stream(), kComputeStream);
}

// Events whose completion the test decides; counts what the policy asked.
struct FakeEvents final : StreamEvents {
  std::map<uint64_t, bool>* done;
  int* synchronized;
  uint64_t next = 0;
  std::vector<int>* recorded_on;
  FakeEvents(std::map<uint64_t, bool>* d, int* s, std::vector<int>* r) : done(d), synchronized(s), recorded_on(r) {}
  uint64_t record(int stream) override {
    recorded_on->push_back(stream);
    (*done)[next] = false;
    return next++;
  }
  bool orders_after(uint64_t e, int) override { return done->at(e); }
  void synchronize(uint64_t e) override {
    ++*synchronized;
    (*done)[e] = true;
  }
  void release(uint64_t e) override { done->erase(e); }
};

struct FakeFixture {
  std::map<uint64_t, bool> done;
  int synchronized = 0;
  std::vector<int> recorded_on;
  CachingAllocator a;
  explicit FakeFixture(int64_t capacity = -1) : a(Device::meta(), std::make_unique<FakeSegmentSource>(capacity)) {
    a.set_stream_events(std::make_unique<FakeEvents>(&done, &synchronized, &recorded_on));
  }
};

TEST(CrossStreamReuse, FreedBlockWaitsForTheEventOfTheStreamThatUsedIt) {
  FakeFixture f;
  Block x = f.a.allocate(64 * KiB);
  f.a.record_stream(x, kCopyStream);
  f.a.record_stream(x, kComputeStream);  // its own stream: not a use to wait for
  f.a.deallocate(x);
  EXPECT_EQ(f.recorded_on, std::vector<int>{kCopyStream}) << "one event, on the stream that used the block";
  EXPECT_EQ(f.a.waiting_bytes(), 64 * KiB);
  EXPECT_EQ(f.a.stats().allocated_bytes.current, 0) << "a waiting block is no longer allocated";
  Block y = f.a.allocate(64 * KiB);  // same size, same stream: must not be x
  EXPECT_NE(y.addr, x.addr);
  EXPECT_EQ(f.a.stats().reserved_bytes.current, 2 * MiB) << "served from the rest of x's segment";
  f.done.begin()->second = true;  // the copy stream's use is over
  Block z = f.a.allocate(64 * KiB);
  EXPECT_EQ(z.addr, x.addr) << "x goes back to its pool once its event is done";
  EXPECT_EQ(f.a.waiting_bytes(), 0);
  EXPECT_EQ(f.synchronized, 0) << "nothing was needed badly enough to wait";
  EXPECT_TRUE(f.done.empty()) << "the event was released";
  f.a.deallocate(y);
  f.a.deallocate(z);
}

TEST(CrossStreamReuse, AWaitingBlockDoesNotMergeUntilReleased) {
  FakeFixture f;
  Block a = f.a.allocate(3 * MiB), b = f.a.allocate(3 * MiB);  // one 20 MiB segment: 3 + 3 + 14 free
  f.a.record_stream(a, kCopyStream);
  f.a.deallocate(a);
  f.a.deallocate(b);  // b merges with the free tail, not with the waiting a
  auto segs = f.a.segments();
  ASSERT_EQ(segs.size(), 1u);
  EXPECT_EQ(segs[0].block_sizes, (std::vector<int64_t>{3 * MiB, 17 * MiB}));
  Block c = f.a.allocate(18 * MiB);  // would fit only if a had merged: a new segment
  EXPECT_EQ(f.a.stats().num_segments, 2);
  f.a.deallocate(c);
  f.a.empty_cache();  // waits for a (rule 2), then releases both wholly free segments
  EXPECT_EQ(f.synchronized, 1);
  EXPECT_EQ(f.a.stats().reserved_bytes.current, 0);
}

TEST(CrossStreamReuse, AFullDeviceWaitsForTheBlockInsteadOfFailing) {
  FakeFixture f(20 * MiB);  // room for one 20 MiB segment
  Block keep = f.a.allocate(2 * MiB);
  Block x = f.a.allocate(16 * MiB);  // 2 + 16 + 2 free
  f.a.record_stream(x, kCopyStream);
  f.a.deallocate(x);
  Block y = f.a.allocate(16 * MiB);  // no room for a new segment: the policy waits for x (rule 2)
  EXPECT_EQ(f.synchronized, 1);
  EXPECT_EQ(y.addr, x.addr);
  EXPECT_EQ(f.a.stats().num_alloc_retries, 0) << "no cached segment had to be released";
  EXPECT_EQ(f.a.stats().num_ooms, 0);
  f.a.deallocate(y);
  f.a.deallocate(keep);
}

// The program-order event source meta uses: a block freed after a copy stream used it is handed
// out again only once the compute stream has waited for an event recorded on the copy stream no
// earlier than the free.
TEST(CrossStreamReuse, ProgramOrderDecidesOnMeta) {
  auto sim = make_simulated_cuda_allocator();
  auto& a = *as_caching(*sim);
  const StreamMark before = a.note_event(kCopyStream);  // recorded before the free: not enough
  Block x = a.allocate(MiB);
  a.record_stream(x, kCopyStream);
  a.deallocate(x);
  a.note_stream_wait(kComputeStream, before);
  Block y = a.allocate(MiB);
  EXPECT_NE(y.addr, x.addr);
  const StreamMark after = a.note_event(kCopyStream);
  Block y2 = a.allocate(MiB);
  EXPECT_NE(y2.addr, x.addr) << "recorded, but the compute stream has not waited for it";
  a.note_stream_wait(kComputeStream, after);
  Block z = a.allocate(MiB);
  EXPECT_EQ(z.addr, x.addr);
  for (const Block& b : {y, y2, z}) a.deallocate(b);
}

// One scenario through the public API (tensors, StreamGuard, Event, record_stream): whether each
// allocation reused the block the copy stream used. Meta and CUDA must answer the same.
std::vector<bool> reuse_decisions(Device dev) {
  std::vector<bool> reused;
  // 22 MiB of f32: a segment of exactly that size (large pool, no remainder). Once the cache is
  // emptied no free block that large is left on the GPU from earlier tests (20 MiB segments hold
  // the smaller blocks), so best fit returns src's block exactly when it is back in the pool.
  allocator_for(dev).empty_cache();
  const int64_t n = 22 * MiB / 4;
  Tensor src = full({n}, 3.0, DType::F32, dev);
  Tensor dst = zeros({n}, DType::F32, dev);
  Event ready(dev);
  ready.record();  // src and dst are written on the compute stream
  {
    StreamGuard copy(kCopyStream);
    ready.block_current_stream();
    for (int i = 0; i < 256; ++i) copy_(dst, src);  // keeps the copy stream busy reading src
  }
  record_stream(src, kCopyStream);
  const uint64_t addr = src.storage()->block.addr;
  src = Tensor();  // freed on the host while the copy stream may still read it
  Tensor other = empty({n}, DType::F32, dev);
  reused.push_back(other.storage()->block.addr == addr);
  fill_(other, -1.0);  // would corrupt dst had it been src's memory
  Event copied(dev);
  {
    StreamGuard copy(kCopyStream);
    copied.record();
  }
  copied.block_current_stream();  // the compute stream waits for the copies
  Tensor again = empty({n}, DType::F32, dev);
  reused.push_back(again.storage()->block.addr == addr);
  fill_(again, -7.0);  // after the copies on the GPU: dst stays 3
  if (!dev.is_meta()) {
    const std::vector<float> v = dst.to(Device::cpu()).to_float_vector();
    int64_t bad = 0;
    for (float f : v) bad += f != 3.0f;
    EXPECT_EQ(bad, 0) << "the copy stream read memory the compute stream had already reused";
  }
  return reused;
}

TEST(CrossStreamReuse, EventAndRecordStreamOnMeta) {
  MetaAllocatorScope sim(true);
  EXPECT_EQ(reuse_decisions(Device::meta()), (std::vector<bool>{false, true}));
}

// On the GPU: a block recorded on the copy stream is not handed out while the copy stream may use
// it (a different block comes back), and is handed out once the compute stream waited for the
// copy stream's event; the same decisions as meta, and the copied data intact.
TEST(CrossStreamReuse, CudaRecordedBlockIsReusedOnlyAfterItsEvent) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  const Device dev = Device::cuda(0);
  EXPECT_EQ(reuse_decisions(dev), (std::vector<bool>{false, true}));
  // Rule 2 on the GPU: empty_cache waits for the event instead of releasing a segment in use.
  Allocator& al = allocator_for(dev);
  Tensor x = full({int64_t(4 * MiB)}, 1.0, DType::F32, dev);
  {
    StreamGuard copy(kCopyStream);
    Tensor y = mul(x, x);  // the copy stream reads x (y comes from the copy stream's pool)
  }
  record_stream(x, kCopyStream);
  x = Tensor();
  EXPECT_GT(as_caching(al)->waiting_bytes(), 0);
  al.empty_cache();
  EXPECT_EQ(as_caching(al)->waiting_bytes(), 0);
  backend_for(dev).synchronize();
}

TEST(CrossStreamReuse, CudaStreamsBeyondTheCommStreamAreRefused) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  StreamGuard g(kNumDeviceStreams);  // a valid number, but the CUDA backend has four streams
  EXPECT_THROW(zeros({4}, DType::F32, Device::cuda(0)), Error);
}

}  // namespace
}  // namespace lt
