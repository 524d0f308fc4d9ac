// The disk tier of --offload optimizer (src/offload/disk_state.*, disk_tier.cpp): the state file's
// windows read what was written, pass after pass, whatever order the chunks come in and whichever
// engine moves them (io_uring, threads; O_DIRECT or buffered); the mapping sees the same bytes;
// the accounts hold the extents and windows; and an OffloadOptimizer with its state on disk takes
// the same bits as one with its state in host memory, through a state dict too.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "error_of.h"
#include "leantrain/memory.h"
#include "leantrain/ops.h"
#include "offload/disk_state.h"
#include "offload/offload_optimizer.h"
#include "offload_test_params.h"

using namespace lt;
using namespace lt::offload;
using lt::test::error_of;

namespace {

// A fresh directory under the system's temporary one, removed with its contents at the end.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() / ("lt-disk-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  static int& counter() {
    static int c = 0;
    return c;
  }
};

DiskStoreOptions small_store(const std::string& dir, bool uring, int windows) {
  DiskStoreOptions o;
  o.dir = dir;
  o.parts = 3;
  o.chunk_elems = 1024;
  o.windows = windows;
  o.prefer_uring = uring;
  return o;
}

float value_of(int id, int64_t elem, int part, int pass) { return float(id * 1000003 + elem * 7 + part * 31 + pass); }

// Passes over every chunk of three parameters in a given order: each checks the previous pass's
// values and writes its own.
void run_passes(DiskStateStore& s, const std::vector<int>& ids, int passes, bool alternate) {
  for (int pass = 0; pass < passes; ++pass) {
    std::vector<std::pair<int, int64_t>> order;
    for (int id : ids)
      for (int64_t c = 0; c < s.chunks(id); ++c) order.emplace_back(id, c);
    if (alternate && pass % 2 == 1) std::reverse(order.begin(), order.end());
    for (auto [id, c] : order) {
      const DiskStateStore::Lease l = s.acquire(id, c, /*fresh=*/pass == 0);
      for (int k = 0; k < 3; ++k)
        for (int64_t i = 0; i < l.count; ++i) {
          if (pass > 0)
            ASSERT_EQ(l.part[k][i], value_of(id, l.begin + i, k, pass - 1))
                << "id " << id << " chunk " << c << " part " << k << " elem " << i << " pass " << pass;
          l.part[k][i] = value_of(id, l.begin + i, k, pass);
        }
      s.release(l);
    }
  }
}

}  // namespace

TEST(OffloadDisk, ChunksReadBackWhatWasWrittenPassAfterPass) {
  for (bool uring : {true, false})
    for (int windows : {2, 3, 5})
      for (bool alternate : {false, true}) {
        SCOPED_TRACE(std::string(uring ? "uring" : "threads") + " windows " + std::to_string(windows) +
                     (alternate ? " alternating order" : " same order"));
        TempDir dir;
        DiskStateStore s(small_store(dir.path.string(), uring, windows));
        // 3000 elements: 3 chunks, the last partial; 1024: exactly one; 5: a tiny one.
        if (!uring) EXPECT_STREQ(s.engine(), "threads");
        RecordProperty(std::string("engine_") + (uring ? "uring" : "threads"), std::string(s.engine()) + (s.direct() ? " O_DIRECT" : " buffered"));
        const std::vector<int> ids = {s.add(3000), s.add(1024), s.add(5)};
        EXPECT_EQ(s.chunks(ids[0]), 3);
        EXPECT_EQ(s.chunks(ids[1]), 1);
        EXPECT_EQ(s.chunks(ids[2]), 1);
        run_passes(s, ids, 5, alternate);
        if (HasFatalFailure()) return;
        s.quiesce();
        // The mapping sees the last pass; writes through it are what the next read sees.
        for (int id : ids)
          for (int k = 0; k < 3; ++k) {
            float* m = s.mapped(id, k);
            ASSERT_NE(m, nullptr);
            const int64_t n = id == ids[0] ? 3000 : id == ids[1] ? 1024 : 5;
            for (int64_t i = 0; i < n; ++i) ASSERT_EQ(m[i], value_of(id, i, k, 4)) << id << " " << k << " " << i;
            for (int64_t i = 0; i < n; ++i) m[i] = value_of(id, i, k, 5);
          }
        s.sync_mapped();
        const DiskStateStore::Lease l = s.acquire(ids[0], 2);
        EXPECT_EQ(l.begin, 2048);
        EXPECT_EQ(l.count, 3000 - 2048);
        for (int k = 0; k < 3; ++k) EXPECT_EQ(l.part[k][l.count - 1], value_of(ids[0], 2999, k, 5));
        s.release(l);
        const DiskTraffic t = s.traffic();
        EXPECT_GT(t.read, 0);
        EXPECT_GT(t.written, 0);
      }
}

TEST(OffloadDisk, ExtentsAndWindowsAreCountedInTheirAccounts) {
  TempDir dir;
  const Device d = Device::cpu();
  const int64_t disk0 = disk_allocator(d).stats().allocated_bytes.current;
  const int64_t pinned0 = pinned_host_allocator(d).stats().category[int(Category::OptimizerState)].current;
  const DiskStoreOptions o = small_store(dir.path.string(), true, 3);
  {
    DiskStateStore s(o);
    s.add(3000);
    s.add(5);
    EXPECT_EQ(disk_allocator(d).stats().allocated_bytes.current - disk0,
              DiskStateStore::extent_bytes(3, 3000) + DiskStateStore::extent_bytes(3, 5));
    EXPECT_EQ(DiskStateStore::extent_bytes(3, 3000), 3 * 12288);
    EXPECT_EQ(disk_allocator(d).stats().category[int(Category::OptimizerState)].current - disk0,
              3 * 12288 + 3 * 4096);
    const int64_t each = DiskStateStore::window_bytes(o) / 3;
    EXPECT_EQ(pinned_host_allocator(d).stats().category[int(Category::OptimizerState)].current - pinned0,
              3 * round_allocation(each));
  }
  EXPECT_EQ(disk_allocator(d).stats().allocated_bytes.current, disk0);
  EXPECT_EQ(pinned_host_allocator(d).stats().category[int(Category::OptimizerState)].current, pinned0);
}

TEST(OffloadDisk, MetaStoreTouchesNoFileAndCountsTheSame) {
  DiskStoreOptions o = small_store("/nonexistent/for/sure", true, 2);
  o.account = Device::meta();
  const int64_t disk0 = disk_allocator(Device::meta()).stats().allocated_bytes.current;
  DiskStateStore s(o);
  EXPECT_TRUE(s.meta());
  s.add(3000);
  EXPECT_EQ(disk_allocator(Device::meta()).stats().allocated_bytes.current - disk0, DiskStateStore::extent_bytes(3, 3000));
  EXPECT_EQ(s.mapped(0, 0), nullptr);
}

TEST(OffloadDisk, BadDirectoriesAreOneLineErrors) {
  const std::string missing = error_of([] { DiskStateStore s(small_store("/nonexistent/leantrain-dir", true, 2)); });
  EXPECT_NE(missing.find("--offload-dir /nonexistent/leantrain-dir"), std::string::npos) << missing;
  EXPECT_EQ(missing.find('\n'), std::string::npos) << missing;
  TempDir dir;
  const std::string file = (dir.path / "a-file").string();
  std::ofstream(file) << "user data\n";
  const std::string not_dir = error_of([&] { DiskStateStore s(small_store(file, true, 2)); });
  EXPECT_NE(not_dir.find("cannot create the optimizer's state file"), std::string::npos) << not_dir;
  std::ifstream in(file);
  std::string kept;
  std::getline(in, kept);
  EXPECT_EQ(kept, "user data");  // untouched
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path), {}), 1);  // nothing left beside it
  DiskStoreOptions o = small_store(dir.path.string(), true, 2);
  o.chunk_elems = 1000;
  EXPECT_NE(error_of([&] { DiskStateStore s(o); }).find("multiple of 1024"), std::string::npos);
}

TEST(OffloadDisk, TheStateFileLeavesNothingInTheDirectory) {
  TempDir dir;
  {
    DiskStateStore s(small_store(dir.path.string(), true, 2));
    s.add(5000);
    EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path), {}), 0);
  }
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path), {}), 0);
}

namespace {

const std::vector<Shape> kShapes = {{3, 1000}, {7, 5}, {1025}, {2048, 3}, {1}};

std::vector<NamedTensor> make_params(DType dt, int seed) { return optim_test::make_params(kShapes, dt, seed); }
using optim_test::set_grads;
using optim_test::two_groups;
using optim_test::same_bits;

OffloadOptions options_for(const std::string& kind) {
  OffloadOptions o;
  o.kind = *choice_named<OptimizerKind>(kind);
  o.adamw.lr = 1e-2;
  o.adamw.weight_decay = 0.1;
  o.lion.lr = 3e-3;
  o.lion.weight_decay = 0.1;
  o.sgd.lr = 5e-2;
  o.sgd.momentum = 0.9;
  o.sgd.nesterov = true;
  o.threads = 2;
  return o;
}

void expect_same_state(const OffloadOptimizer& a, const OffloadOptimizer& b, const std::string& when) {
  const OptimizerStateDict x = a.state_dict(), y = b.state_dict();
  ASSERT_EQ(x.tensors.size(), y.tensors.size()) << when;
  for (const auto& [k, t] : x.tensors) ASSERT_TRUE(same_bits(t, y.tensors.at(k))) << k << " " << when;
}

}  // namespace

TEST(OffloadDisk, OptimizerWithStateOnDiskTakesTheHostTiersBits) {
  for (const char* kind : {"adamw", "lion", "sgd"})
    for (DType dt : {DType::BF16, DType::F16})
      for (int64_t limit : {int64_t(-1), int64_t(48000)}) {  // all on disk; the small ones on the host (windows: 32 KiB)
        SCOPED_TRACE(std::string(kind) + " " + dtype_name(dt) + " limit " + std::to_string(limit));
        TempDir dir;
        std::vector<NamedTensor> host_ps = make_params(dt, 1), disk_ps = make_params(dt, 1);
        OffloadOptimizer host(two_groups(host_ps), options_for(kind));
        OffloadOptions o = options_for(kind);
        o.disk_dir = dir.path.string();
        o.host_limit = limit;
        o.disk_chunk_elems = 1024;
        o.disk_windows = 2;
        OffloadOptimizer disk(two_groups(disk_ps), o);
        ASSERT_NE(disk.disk(), nullptr);
        EXPECT_EQ(disk.disk_params(), limit < 0 ? 5 : 2);  // under 48000 B: the 3000- and 6144-element ones go
        for (int t = 1; t <= 4; ++t) {
          set_grads(host_ps, t);
          set_grads(disk_ps, t);
          const float scale = t == 3 ? 0.5f : 1.0f;
          host.step(scale);
          disk.step(scale);
          for (size_t i = 0; i < host_ps.size(); ++i)
            ASSERT_TRUE(same_bits(host_ps[i].second, disk_ps[i].second)) << host_ps[i].first << " step " << t;
          expect_same_state(host, disk, "step " + std::to_string(t));
          if (HasFatalFailure()) return;
        }
        // Resume: a fresh disk-tier optimizer loads the state and steps on to the same bits.
        TempDir dir2;
        std::vector<NamedTensor> resumed_ps = make_params(dt, 1);
        for (size_t i = 0; i < resumed_ps.size(); ++i) copy_(resumed_ps[i].second, disk_ps[i].second);
        o.disk_dir = dir2.path.string();
        OffloadOptimizer resumed(two_groups(resumed_ps), o);
        resumed.load_state_dict(disk.state_dict());
        set_grads(host_ps, 5);
        set_grads(resumed_ps, 5);
        host.step();
        resumed.step();
        for (size_t i = 0; i < host_ps.size(); ++i)
          ASSERT_TRUE(same_bits(host_ps[i].second, resumed_ps[i].second)) << host_ps[i].first << " after resume";
        expect_same_state(host, resumed, "after resume");
        if (HasFatalFailure()) return;
      }
}

TEST(OffloadDisk, WhatStaysOnTheHost) {
  TempDir dir;
  // f32 parameters: their state stays on the host, so no file at all.
  std::vector<NamedTensor> f32 = make_params(DType::F32, 2);
  OffloadOptions o = options_for("adamw");
  o.disk_dir = dir.path.string();
  o.disk_chunk_elems = 1024;
  OffloadOptimizer only_f32(two_groups(f32), o);
  EXPECT_EQ(only_f32.disk(), nullptr);
  // Everything under the limit: no file either.
  std::vector<NamedTensor> bf16 = make_params(DType::BF16, 2);
  o.host_limit = int64_t(1) << 30;
  OffloadOptimizer fits(two_groups(bf16), o);
  EXPECT_EQ(fits.disk(), nullptr);
  // A limit below the windows: one line.
  o.host_limit = 4096;
  const std::string e = error_of([&] { OffloadOptimizer t(two_groups(make_params(DType::BF16, 3)), o); });
  EXPECT_NE(e.find("--host-memory-limit"), std::string::npos) << e;
  EXPECT_NE(e.find("I/O windows"), std::string::npos) << e;
  // 8-bit state and a limit without a directory are refused.
  OffloadOptions q = options_for("adamw8bit");
  q.disk_dir = dir.path.string();
  EXPECT_NE(error_of([&] { OffloadOptimizer t(two_groups(make_params(DType::BF16, 4)), q); }).find("--offload-dir with --optimizer adamw8bit"),
            std::string::npos);
  OffloadOptions l = options_for("adamw");
  l.host_limit = 1 << 20;
  EXPECT_NE(error_of([&] { OffloadOptimizer t(two_groups(make_params(DType::BF16, 5)), l); }).find("without --offload-dir"),
            std::string::npos);
}
