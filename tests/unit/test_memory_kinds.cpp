// Memory kinds (seam 5): the pinned-host account every staging buffer goes through, the loader's
// ring counted in it (Category::Input) the same way on cpu, meta and CUDA, a refusal that falls
// back to pageable memory, and plan == measured for the pinned peak.
#include <gtest/gtest.h>

#include "data/synthetic.h"
#include "leantrain/cuda_info.h"
#include "leantrain/data.h"
#include "leantrain/error.h"
#include "leantrain/plan.h"
#include "memory/host_allocators.h"
#include "train_test_util.h"

namespace lt {
namespace {

// The loader of test_data_loader's trace test: 3x8x8 f32 images, batch 4. A staging buffer holds
// the inputs (4 * 768 B), then the targets at a 64-byte boundary (4 * 8 B): 3104 B, 3584 rounded.
constexpr int64_t kBufferBytes = 3584;

struct PinnedUse {
  int64_t peak = 0, after = 0, allocs = 0;
  int64_t input_peak = 0;
  bool pinned = false;
};

PinnedUse loader_pinned_use(Device dev, int prefetch, bool pin = true) {
  Allocator& host = pinned_host_allocator(dev);
  host.reset_peak_stats();
  const MemoryStats before = host.stats();
  PinnedUse u;
  {
    LoaderOptions o;
    o.batch_size = 4;
    o.prefetch = prefetch;
    o.workers = 2;
    o.device = dev;
    o.pin_memory = pin;
    DataLoader dl(std::make_shared<SyntheticImages>(21, 3, 8, 10, 5), o);
    for (int b = 0; b < 7; ++b) dl.next();
    u.pinned = dl.pinned();
  }
  const MemoryStats s = host.stats();
  u.peak = s.allocated_bytes.peak - before.allocated_bytes.current;
  u.after = s.allocated_bytes.current - before.allocated_bytes.current;
  u.allocs = s.num_allocs - before.num_allocs;
  u.input_peak = s.category[int(Category::Input)].peak - before.category[int(Category::Input)].current;
  return u;
}

TEST(PinnedHost, LoaderRingIsCountedAsInput) {
  for (int prefetch : {0, 2, 5}) {
    const PinnedUse u = loader_pinned_use(Device::cpu(), prefetch);
    EXPECT_EQ(u.peak, (prefetch + 2) * kBufferBytes) << "prefetch " << prefetch;
    EXPECT_EQ(u.input_peak, u.peak) << "every staging byte is the loader's input";
    EXPECT_EQ(u.allocs, prefetch + 2);
    EXPECT_EQ(u.after, 0) << "the ring goes back when the loader is destroyed";
    EXPECT_FALSE(u.pinned) << "the CPU copies synchronously";
  }
  const PinnedUse pageable = loader_pinned_use(Device::cpu(), 2, false);  // --no pinning: nothing pinned
  EXPECT_EQ(pageable.peak, 0);
}

TEST(PinnedHost, MetaCountsWhatCpuCounts) {
  for (int prefetch : {0, 3}) {
    const PinnedUse cpu = loader_pinned_use(Device::cpu(), prefetch), meta = loader_pinned_use(Device::meta(), prefetch);
    EXPECT_EQ(meta.peak, cpu.peak);
    EXPECT_EQ(meta.allocs, cpu.allocs);
  }
}

TEST(PinnedHost, AccountsAreSeparateFromTheDeviceAndNamedInTheirErrors) {
  Allocator& host = pinned_host_allocator(Device::cpu());
  EXPECT_EQ(host.kind(), MemoryKind::PinnedHost);
  EXPECT_EQ(allocator_for(Device::cpu()).kind(), MemoryKind::Device);
  EXPECT_NE(&host, &pinned_host_allocator(Device::meta()));
  const int64_t device_before = allocator_for(Device::cpu()).stats().allocated_bytes.current;
  {
    MemoryCategoryScope c(Category::OptimizerState);
    std::shared_ptr<Storage> s = allocate_pinned_host(1000, Device::cpu());
    ASSERT_TRUE(s);
    EXPECT_EQ(s->device, Device::cpu());
    EXPECT_EQ(host.stats().category[int(Category::OptimizerState)].current, 1024);
    EXPECT_EQ(allocator_for(Device::cpu()).stats().allocated_bytes.current, device_before);
    static_cast<char*>(s->data())[999] = 1;  // real memory
  }
  EXPECT_EQ(host.stats().category[int(Category::OptimizerState)].current, 0);
  try {
    host.allocate(int64_t(1) << 62);
    FAIL() << "expected an OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("out of pinned host memory for cpu"), std::string::npos) << e.what();
  }
}

// Pinned memory is limited: a refused buffer makes the loader stage in pageable memory (one
// warning), and nothing stays counted.
TEST(PinnedHost, RefusalFallsBackToPageable) {
  auto limited = make_host_pinned_allocator(Device::meta());
  limited->set_limit(2 * kBufferBytes);  // room for 2 of the 4 buffers
  set_pinned_host_allocator(Device::meta(), std::move(limited));
  const PinnedUse u = loader_pinned_use(Device::meta(), 2);
  Allocator& host = pinned_host_allocator(Device::meta());
  EXPECT_EQ(host.stats().allocated_bytes.current, 0);
  EXPECT_EQ(host.stats().num_ooms, 1);
  EXPECT_EQ(u.after, 0);
  set_pinned_host_allocator(Device::meta(), make_host_pinned_allocator(Device::meta()));
}

// The plan's pinned peak is the run's: the training loader's ring, and the evaluation loader's
// on top of it while it lives.
TEST(PinnedHost, PlanPredictsTheRunsPinnedPeak) {
  test::TempDir dir;
  RunConfig c = test::tiny_gpt(dir.path);
  c.steps = 2;
  const PlanResult p = plan_run(c, PlanOptions{"cpu"});
  const RunResult r = train(c);
  EXPECT_GT(p.pinned_host.allocated_bytes.peak, 0);
  EXPECT_EQ(p.pinned_host.allocated_bytes.peak, r.pinned_host.allocated_bytes.peak);
  EXPECT_EQ(p.pinned_host.category[int(Category::Input)].peak, r.pinned_host.category[int(Category::Input)].peak);
  EXPECT_EQ(p.pinned_host.allocated_bytes.current, r.pinned_host.allocated_bytes.current)
      << "at the end: the training loader's ring";
  // Two rings at once during the evaluation: more than the training ring alone.
  EXPECT_GT(r.pinned_host.allocated_bytes.peak, r.pinned_host.allocated_bytes.current);
  const std::string table = memory_summary(r.device, r.memory, r.pinned_host);
  EXPECT_NE(table.find("| Pinned host memory (ordinary)"), std::string::npos) << table;
  EXPECT_NE(plan_text(p).find("predicted peak pinned host"), std::string::npos);
  EXPECT_NE(plan_json(p).find("\"peak_pinned_host_bytes\": " + std::to_string(p.pinned_host.allocated_bytes.peak)),
            std::string::npos);
}

TEST(PinnedHost, CudaPinsWhatMetaCounts) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  const PinnedUse cuda = loader_pinned_use(Device::cuda(0), 2), meta = loader_pinned_use(Device::meta(), 2);
  EXPECT_TRUE(cuda.pinned) << "cudaHostAlloc refused the staging buffers";
  EXPECT_EQ(cuda.peak, meta.peak);
  EXPECT_EQ(cuda.input_peak, meta.input_peak);
  EXPECT_EQ(cuda.after, 0);
}

}  // namespace
}  // namespace lt
