// DataLoader: seeded per-epoch order, determinism with and without worker threads (and for any
// number of them), cheap skip-ahead, input/target alignment for images and text, the Input
// memory category, worker errors; staging buffers (pinned on CUDA) give the same batches and the
// same device allocations as pageable ones.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>

#include "data/synthetic.h"
#include "leantrain/device.h"
#include "leantrain/data.h"
#include "leantrain/error.h"
#include "leantrain/ops.h"

using namespace lt;

namespace {

// 10 images of 2x3 whose pixels all equal 20*i and label i.
std::shared_ptr<const ImageSet> tiny_images(int64_t n = 10) {
  auto s = std::make_shared<ImageSet>();
  s->count = n;
  s->rows = 2;
  s->cols = 3;
  for (int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < 6; ++j) s->pixels.push_back(uint8_t(20 * i));
    s->labels.push_back(uint8_t(i));
  }
  return s;
}

std::vector<int64_t> labels_of(DataLoader& dl, int64_t batches) {
  std::vector<int64_t> out;
  for (int64_t b = 0; b < batches; ++b)
    for (int64_t v : dl.next().targets.to_int_vector()) out.push_back(v);
  return out;
}

LoaderOptions opts(int64_t batch, uint64_t seed, int prefetch, bool drop_last = false) {
  LoaderOptions o;
  o.batch_size = batch;
  o.seed = seed;
  o.prefetch = prefetch;
  o.drop_last = drop_last;
  return o;
}

}  // namespace

TEST(DataLoader, ImagesAreNormalisedAndAligned) {
  auto ds = std::make_shared<ImageDataset>(tiny_images(), 0.5f, 0.25f);
  DataLoader dl(ds, opts(4, 1, 2));
  EXPECT_EQ(dl.batches_per_epoch(), 3);
  Batch b = dl.next();
  EXPECT_EQ(b.inputs.shape(), (Shape{4, 1, 2, 3}));
  EXPECT_EQ(b.inputs.dtype(), DType::F32);
  EXPECT_EQ(b.targets.shape(), (Shape{4}));
  EXPECT_EQ(b.targets.dtype(), DType::I64);
  EXPECT_EQ(b.inputs.category(), Category::Input);
  EXPECT_EQ(b.targets.category(), Category::Input);
  auto x = b.inputs.to_float_vector();
  auto y = b.targets.to_int_vector();
  for (int64_t r = 0; r < 4; ++r)
    for (int j = 0; j < 6; ++j) EXPECT_FLOAT_EQ(x[size_t(r * 6 + j)], (20.0f * float(y[size_t(r)]) / 255.0f - 0.5f) / 0.25f);
  dl.next();
  Batch last = dl.next();  // 10 = 4 + 4 + 2
  EXPECT_EQ(last.targets.shape(), (Shape{2}));
  EXPECT_EQ(last.index, 2);
  EXPECT_EQ(dl.epoch(), 1);
}

TEST(DataLoader, EpochIsAPermutationThatChangesPerEpochAndSeed) {
  auto ds = std::make_shared<ImageDataset>(tiny_images(50));
  DataLoader a(ds, opts(10, 7, 2));
  auto e0 = labels_of(a, 5), e1 = labels_of(a, 5);
  EXPECT_EQ(std::set<int64_t>(e0.begin(), e0.end()).size(), 50u);
  EXPECT_EQ(std::set<int64_t>(e1.begin(), e1.end()).size(), 50u);
  EXPECT_NE(e0, e1);
  DataLoader b(ds, opts(10, 8, 2));
  EXPECT_NE(labels_of(b, 5), e0);
  LoaderOptions no_shuffle = opts(10, 7, 2);
  no_shuffle.shuffle = false;
  DataLoader c(ds, no_shuffle);
  auto in_order = labels_of(c, 5);
  for (int64_t i = 0; i < 50; ++i) EXPECT_EQ(in_order[size_t(i)], i);
}

TEST(DataLoader, DeterministicWithAndWithoutWorker) {
  auto ds = std::make_shared<ImageDataset>(tiny_images(23));
  std::vector<std::vector<int64_t>> runs;
  for (int prefetch : {0, 1, 2, 5}) {
    DataLoader dl(ds, opts(4, 42, prefetch, /*drop_last=*/true));
    EXPECT_EQ(dl.batches_per_epoch(), 5);
    runs.push_back(labels_of(dl, 12));  // crosses two epoch boundaries
  }
  for (size_t k = 1; k < runs.size(); ++k) EXPECT_EQ(runs[k], runs[0]);
}

TEST(DataLoader, SkipAheadMatchesContinuousRun) {
  auto ds = std::make_shared<ImageDataset>(tiny_images(30));
  DataLoader full(ds, opts(4, 3, 2));  // 8 batches per epoch
  auto all = labels_of(full, 8 + 8 + 3);
  for (int prefetch : {0, 2}) {
    DataLoader dl(ds, opts(4, 3, prefetch));
    dl.next();  // the worker is already ahead; seek must discard its queue
    dl.seek(1, 5);
    Batch b = dl.next();
    EXPECT_EQ(b.epoch, 1);
    EXPECT_EQ(b.index, 5);
    auto rest = b.targets.to_int_vector();
    for (int64_t v : labels_of(dl, 10)) rest.push_back(v);
    // batch 5 of epoch 1 = global batch 13, samples 8*4 + 5*4 - 2 (epoch 0's last batch has 2).
    std::vector<int64_t> want(all.begin() + (30 + 20), all.end());
    want.resize(std::min(want.size(), rest.size()));
    rest.resize(want.size());
    EXPECT_EQ(rest, want);
    dl.seek_step(16);
    EXPECT_EQ(dl.epoch(), 2);
    EXPECT_EQ(dl.index(), 0);
  }
  DataLoader dl(ds, opts(4, 3, 2));
  EXPECT_THROW(dl.seek(0, 8), Error);
}

TEST(DataLoader, TextWindowsTargetsAreNextTokens) {
  auto tokens = std::make_shared<TokenStream>();
  for (int32_t i = 0; i < 101; ++i) tokens->append(std::span(&i, 1));
  auto ds = std::make_shared<TokenWindows>(tokens, 10);
  EXPECT_EQ(ds->size(), 10);
  DataLoader dl(ds, opts(3, 5, 2, /*drop_last=*/true));
  std::set<int64_t> starts;
  for (int k = 0; k < dl.batches_per_epoch(); ++k) {
    Batch b = dl.next();
    EXPECT_EQ(b.inputs.shape(), (Shape{3, 10}));
    EXPECT_EQ(b.targets.shape(), (Shape{3, 10}));
    EXPECT_EQ(b.inputs.dtype(), DType::I64);
    auto x = b.inputs.to_int_vector(), y = b.targets.to_int_vector();
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(x[size_t(r * 10)] % 10, 0);  // windows start every 10 tokens
      starts.insert(x[size_t(r * 10)]);
      for (int t = 0; t < 10; ++t) {
        EXPECT_EQ(y[size_t(r * 10 + t)], x[size_t(r * 10 + t)] + 1);
        if (t) EXPECT_EQ(x[size_t(r * 10 + t)], x[size_t(r * 10 + t - 1)] + 1);
      }
    }
  }
  EXPECT_EQ(starts.size(), 9u);
  EXPECT_EQ(TokenWindows(tokens, 10, 5).size(), 19);
  EXPECT_EQ(TokenWindows(tokens, 100).size(), 1);
  EXPECT_THROW(TokenWindows(tokens, 101), Error);
}

TEST(DataLoader, MetaDeviceBatchesHaveShapesOnly) {
  auto ds = std::make_shared<ImageDataset>(tiny_images());
  LoaderOptions o = opts(5, 0, 1);
  o.device = Device::meta();
  DataLoader dl(ds, o);
  Batch b = dl.next();
  EXPECT_TRUE(b.inputs.device().is_meta());
  EXPECT_EQ(b.inputs.shape(), (Shape{5, 1, 2, 3}));
}

TEST(DataLoader, InvalidOptionsThrow) {
  auto ds = std::make_shared<ImageDataset>(tiny_images(3));
  EXPECT_THROW(DataLoader(ds, opts(4, 0, 2, /*drop_last=*/true)), Error);
  EXPECT_THROW(DataLoader(ds, opts(0, 0, 2)), Error);
}

namespace {

// Every value of every batch (inputs as raw bytes, targets) and its position.
struct Seen {
  int64_t epoch, index;
  std::vector<uint8_t> inputs;
  std::vector<int64_t> targets;
  bool operator==(const Seen&) const = default;
};

std::vector<Seen> drain(DataLoader& dl, int64_t batches) {
  std::vector<Seen> out;
  for (int64_t b = 0; b < batches; ++b) {
    Batch x = dl.next();
    Seen s{x.epoch, x.index, std::vector<uint8_t>(size_t(x.inputs.nbytes())), x.targets.to_int_vector()};
    std::memcpy(s.inputs.data(), x.inputs.raw_data(), s.inputs.size());
    out.push_back(std::move(s));
  }
  return out;
}

LoaderOptions with_workers(LoaderOptions o, int workers) {
  o.workers = workers;
  return o;
}

// Throws when asked for sample `bad`.
class FailingDataset : public Dataset {
 public:
  explicit FailingDataset(int64_t bad) : bad_(bad) {}
  int64_t size() const override { return 40; }
  Shape input_shape() const override { return {3}; }
  DType input_dtype() const override { return DType::F32; }
  Shape target_shape() const override { return {}; }
  void get(int64_t i, void* input, int64_t* target) const override {
    if (i == bad_) fail("sample " + std::to_string(i) + " is unreadable", "the test says so", "none");
    float* x = static_cast<float*>(input);
    for (int k = 0; k < 3; ++k) x[k] = float(i);
    *target = i;
  }

 private:
  int64_t bad_;
};

}  // namespace

// Synthetic ViT-like images (every value differs), 21 samples in batches of 4 (the last of each
// epoch has 1): any worker count and prefetch depth gives the same bytes, across two epoch
// boundaries.
TEST(DataLoader, SameBatchesForAnyWorkerCount) {
  auto ds = std::make_shared<SyntheticImages>(21, 3, 8, 10, 5);
  DataLoader ref(ds, opts(4, 9, 0));  // built on the caller's thread
  const auto want = drain(ref, 15);
  EXPECT_EQ(want[5].index, 5);
  EXPECT_EQ(want[5].targets.size(), 1u);
  EXPECT_EQ(want[6].epoch, 1);
  for (int workers : {1, 2, 3, 4, 7})
    for (int prefetch : {1, 2, 5}) {
      DataLoader dl(ds, with_workers(opts(4, 9, prefetch), workers));
      EXPECT_TRUE(drain(dl, 15) == want) << workers << " workers, prefetch " << prefetch;
    }
}

// Resume: seeking (also while workers are ahead, and back to an earlier epoch) gives what a
// continuous run gives at that position, with 1 and with 4 workers.
TEST(DataLoader, SeekIsTheSameForAnyWorkerCount) {
  auto ds = std::make_shared<SyntheticImages>(30, 3, 4, 10, 1);
  DataLoader full(ds, opts(4, 3, 0, /*drop_last=*/true));  // 7 batches per epoch
  const auto all = drain(full, 3 * 7);
  for (int workers : {1, 4}) {
    DataLoader dl(ds, with_workers(opts(4, 3, 2, /*drop_last=*/true), workers));
    drain(dl, 3);  // the workers are ahead; seek drops their batches
    dl.seek(1, 5);
    auto got = drain(dl, 6);  // crosses into epoch 2
    EXPECT_TRUE(std::equal(got.begin(), got.end(), all.begin() + 7 + 5)) << workers << " workers";
    dl.seek_step(2);
    got = drain(dl, 2);
    EXPECT_TRUE(std::equal(got.begin(), got.end(), all.begin() + 2)) << workers << " workers";
  }
}

TEST(DataLoader, WorkerErrorsReachTheCaller) {
  auto ds = std::make_shared<FailingDataset>(13);
  for (int workers : {1, 4}) {
    DataLoader dl(ds, with_workers(opts(5, 0, 2), workers));
    dl.seek(0, 0);
    bool threw = false;
    try {
      for (int b = 0; b < dl.batches_per_epoch(); ++b) dl.next();
    } catch (const Error& e) {
      threw = std::string(e.what()).find("sample 13 is unreadable") != std::string::npos;
    }
    EXPECT_TRUE(threw) << workers << " workers";
  }  // and the destructor joins the workers
  LoaderOptions bad = opts(5, 0, 2);
  bad.workers = 0;
  EXPECT_THROW(DataLoader(std::make_shared<FailingDataset>(-1), bad), Error);
  EXPECT_GE(default_loader_workers(), 1);
  EXPECT_LE(default_loader_workers(), 8);
}

// The synthetic images are roughly N(0, 1) and a pure function of (seed, index).
TEST(SyntheticImages, MeanZeroVarianceOne) {
  SyntheticImages ds(4, 3, 64, 10, 0);
  std::vector<float> x(3 * 64 * 64), again(x.size());
  double sum = 0, sq = 0;
  int64_t label = 0, label_again = 0;
  for (int64_t i = 0; i < 4; ++i) {
    ds.get(i, x.data(), &label);
    for (float v : x) {
      sum += v;
      sq += double(v) * v;
      EXPECT_LT(std::abs(v), 3.0f);
    }
    ds.get(i, again.data(), &label_again);
    EXPECT_EQ(x, again);
    EXPECT_EQ(label, label_again);
    EXPECT_TRUE(label >= 0 && label < 10);
  }
  const double n = 4.0 * double(x.size()), mean = sum / n;
  EXPECT_NEAR(mean, 0.0, 0.02);
  EXPECT_NEAR(sq / n - mean * mean, 1.0, 0.02);
}

// Staging buffers (the ring the workers fill, copied from with events) against pageable buffers
// copied synchronously: the same bytes on the CPU for any worker count and prefetch depth.
TEST(DataLoader, StagedAndPageableBuffersGiveTheSameBatches) {
  auto ds = std::make_shared<SyntheticImages>(21, 3, 8, 10, 5);
  LoaderOptions pageable = opts(4, 9, 0);
  pageable.pin_memory = false;
  DataLoader ref(ds, pageable);
  const auto want = drain(ref, 15);
  for (int workers : {1, 4})
    for (int prefetch : {0, 1, 3}) {
      DataLoader dl(ds, with_workers(opts(4, 9, prefetch), workers));
      EXPECT_TRUE(drain(dl, 7) == std::vector<Seen>(want.begin(), want.begin() + 7)) << workers << " " << prefetch;
      EXPECT_FALSE(dl.pinned());  // the CPU copies synchronously
      dl.seek(1, 1);              // workers stop with buffers in their slots; all of them come back
      auto got = drain(dl, 8);
      EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin() + 7)) << workers << " " << prefetch;
    }
}

namespace {

// The device allocations of 8 batches (every other one kept alive), in order.
std::vector<MemoryEvent> loader_trace(Device dev, bool pin, int prefetch) {
  auto ds = std::make_shared<SyntheticImages>(21, 3, 8, 10, 5);
  LoaderOptions o = with_workers(opts(4, 9, prefetch), 3);
  o.device = dev;
  o.pin_memory = pin;
  Allocator& alloc = allocator_for(dev);
  alloc.clear_history();
  alloc.set_history(true);
  {
    DataLoader dl(ds, o);
    std::vector<Batch> keep;
    for (int b = 0; b < 8; ++b) {
      Batch x = dl.next();
      if (b % 2 == 0) keep.push_back(std::move(x));
    }
  }
  alloc.set_history(false);
  std::vector<MemoryEvent> t;
  for (const MemoryEvent& e : alloc.history())
    if (e.action == MemoryEvent::Action::Alloc || e.action == MemoryEvent::Action::Free) t.push_back(e);
  alloc.clear_history();
  return t;
}

bool same_trace(const std::vector<MemoryEvent>& a, const std::vector<MemoryEvent>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].action != b[i].action || a[i].size != b[i].size || a[i].requested != b[i].requested ||
        a[i].category != b[i].category)
      return false;
  return true;
}

}  // namespace

// Staging changes no device allocation: per batch, inputs then targets (category Input), the
// same on meta as on the CPU, with and without staging buffers, for any prefetch depth.
TEST(DataLoader, MetaTraceUnchangedByStaging) {
  const auto meta = loader_trace(Device::meta(), true, 2);
  std::vector<int64_t> rows = {4, 4, 4, 4, 4, 1, 4, 4};  // 21 samples: the 6th batch has 1
  std::vector<int64_t> allocs;
  for (const MemoryEvent& e : meta) {
    EXPECT_EQ(e.category, Category::Input);
    if (e.action == MemoryEvent::Action::Alloc) allocs.push_back(e.requested);
  }
  std::vector<int64_t> want;
  for (int64_t r : rows) {
    want.push_back(r * 3 * 8 * 8 * 4);
    want.push_back(r * 8);
  }
  EXPECT_EQ(allocs, want);
  EXPECT_TRUE(same_trace(meta, loader_trace(Device::cpu(), true, 2)));
  EXPECT_TRUE(same_trace(meta, loader_trace(Device::cpu(), false, 2)));
  EXPECT_TRUE(same_trace(meta, loader_trace(Device::meta(), false, 0)));
  EXPECT_TRUE(same_trace(meta, loader_trace(Device::meta(), true, 5)));
  if (cuda_available()) EXPECT_TRUE(same_trace(meta, loader_trace(Device::cuda(0), true, 2)));
}

// The pinned path on CUDA: 50 batches (4 workers, crossing epochs and a short last batch) are
// requested while the GPU is kept busy, so the host runs ahead and buffers are reused while
// earlier copies are still queued. Every batch, copied back, must equal the CPU loader's bytes:
// a buffer rewritten before the GPU read it would show up here.
TEST(DataLoader, CudaPinnedBatchesEqualCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  auto ds = std::make_shared<SyntheticImages>(333, 3, 64, 10, 7);  // 11 batches of 32 per epoch, the last 13
  const int64_t n = 50;
  DataLoader ref(ds, opts(32, 4, 0));
  const auto want = drain(ref, n + 5);
  for (int prefetch : {2, 0}) {
    LoaderOptions o = with_workers(opts(32, 4, prefetch), 4);
    o.device = Device::cuda(0);
    DataLoader dl(ds, o);
    Generator gen(1);
    Tensor busy = randn({4096, 4096}, gen, 0.01f, DType::F32, o.device);
    std::vector<Batch> got;
    for (int64_t b = 0; b < n; ++b) {
      got.push_back(dl.next());
      Tensor w = matmul(busy, busy);  // ~ms of GPU work queued behind each copy
      if (b == 20) {
        dl.seek(2, 3);  // from position 21 to 25: the workers' batches are dropped mid-flight
        got.push_back(dl.next());
      }
    }
    EXPECT_TRUE(dl.pinned()) << "cudaHostAlloc refused the staging buffers";
    int64_t bad = 0;
    for (size_t k = 0; k < got.size(); ++k) {
      const Batch& x = got[k];
      const int64_t pos = x.epoch * 11 + x.index;
      Seen s{x.epoch, x.index, std::vector<uint8_t>(size_t(x.inputs.nbytes())), x.targets.to(Device::cpu()).to_int_vector()};
      Tensor host = x.inputs.to(Device::cpu());
      std::memcpy(s.inputs.data(), host.raw_data(), s.inputs.size());
      ASSERT_LT(pos, int64_t(want.size()));
      if (!(s == want[size_t(pos)])) ++bad;
    }
    EXPECT_EQ(bad, 0) << "of " << got.size() << " batches, prefetch " << prefetch;
  }
}
