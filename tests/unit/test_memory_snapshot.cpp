// Memory snapshots: the history ring, the PyTorch snapshot layout (JSON and pickle), and the files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "leantrain/error.h"
#include "leantrain/memory_snapshot.h"
#include "memory/host_allocators.h"
#include "memory/snapshot.h"
#include "test_pickle_decode.h"

namespace lt {
namespace {

using nlohmann::json;
constexpr int64_t MiB = 1 << 20;

// A small training-like sequence: parameters, activations, a backward buffer retagged to a
// gradient, optimizer state, frees. Leaves some blocks live.
struct Scenario {
  std::vector<Block> live;
  void run(Allocator& a) {
    auto alloc = [&](Category c, const char* op, int64_t n) {
      MemoryCategoryScope cs{c};
      OpNameScope os{op};
      return a.allocate(n);
    };
    live.push_back(alloc(Category::Parameter, "init", 3 * MiB));
    live.push_back(alloc(Category::Parameter, "init", 1000));
    Block act1 = alloc(Category::Activation, "linear", 5 * MiB);
    Block act2 = alloc(Category::Activation, "gelu", 200 * 1024);
    Block grad = alloc(Category::Activation, "linear_backward", 3 * MiB);
    {
      OpNameScope os{"backward"};
      a.retag(grad, Category::Gradient);
    }
    live.push_back(grad);
    live.push_back(alloc(Category::OptimizerState, "adamw", 6 * MiB));
    live.push_back(alloc(Category::Input, "loader", 4096));
    a.deallocate(act2);
    a.deallocate(act1);
    live.push_back(alloc(Category::Workspace, "gemm", 700 * 1024));
  }
  void release(Allocator& a) {
    for (const Block& b : live) a.deallocate(b);
    live.clear();
  }
};

std::string snapshot(const Allocator& a, SnapshotFormat f) { return memory_snapshot_string(capture_memory_state(a), f); }

TEST(MemoryHistory, EventsCarrySequenceTimeAndStream) {
  auto a = make_simulated_cuda_allocator();
  a->set_history(true);
  Scenario s;
  {
    AllocStreamScope side{2};
    MemoryCategoryScope cs{Category::Input};
    s.live.push_back(a->allocate(1000));  // a segment of its own on stream 2
  }
  s.run(*a);
  std::vector<MemoryEvent> h = a->history();
  ASSERT_GT(h.size(), 10u);
  for (size_t i = 1; i < h.size(); ++i) {
    EXPECT_EQ(h[i].seq, h[i - 1].seq + 1);
    EXPECT_GE(h[i].time_us, h[i - 1].time_us);
  }
  EXPECT_EQ(h[0].action, MemoryEvent::Action::SegmentAlloc);
  EXPECT_EQ(h[0].stream, 2) << "segment events carry the segment's stream";
  int retags = 0;
  for (const MemoryEvent& e : h) {
    if (e.action != MemoryEvent::Action::Retag) continue;
    ++retags;
    EXPECT_EQ(e.from, Category::Activation);
    EXPECT_EQ(e.category, Category::Gradient);
    EXPECT_STREQ(e.op, "backward");
  }
  EXPECT_EQ(retags, 1);
  s.release(*a);
}

TEST(MemoryHistory, RingKeepsTheNewestEvents) {
  MetaAllocator a;
  a.set_history(true);
  a.set_history_max_entries(10);
  std::vector<Block> bs;
  for (int i = 0; i < 12; ++i) bs.push_back(a.allocate(512 * (i + 1)));  // 2 events each
  std::vector<MemoryEvent> h = a.history();
  ASSERT_EQ(h.size(), 10u);
  EXPECT_EQ(a.history_dropped(), 14u);
  EXPECT_EQ(h.front().seq, 14u);
  EXPECT_EQ(h.back().seq, 23u);
  EXPECT_EQ(h.back().size, 512 * 12);
  for (size_t i = 1; i < h.size(); ++i) EXPECT_EQ(h[i].seq, h[i - 1].seq + 1);
  // Shrinking keeps the newest; clearing resets the drop count but not the sequence.
  a.set_history_max_entries(4);
  h = a.history();
  ASSERT_EQ(h.size(), 4u);
  EXPECT_EQ(h.front().seq, 20u);
  EXPECT_EQ(a.history_dropped(), 20u);
  a.clear_history();
  EXPECT_EQ(a.history_dropped(), 0u);
  a.deallocate(bs.back());
  bs.pop_back();
  ASSERT_EQ(a.history().size(), 2u);
  EXPECT_EQ(a.history().front().seq, 24u);
  EXPECT_THROW(a.set_history_max_entries(0), Error);
  for (const Block& b : bs) a.deallocate(b);
}

// The JSON snapshot of the simulated CUDA allocator, checked against its own stats.
TEST(MemorySnapshot, JsonLayoutMatchesTheAllocator) {
  auto a = make_simulated_cuda_allocator();
  a->set_history(true);
  Scenario s;
  s.run(*a);
  const MemoryStats st = a->stats();
  json j = json::parse(snapshot(*a, SnapshotFormat::Json));

  ASSERT_TRUE(j.contains("segments") && j.contains("device_traces"));
  int64_t reserved = 0, allocated = 0, requested = 0;
  std::set<std::string> block_names;
  for (const json& seg : j["segments"]) {
    for (const char* k : {"device", "address", "total_size", "allocated_size", "active_size", "requested_size", "stream",
                          "segment_type", "blocks"})
      ASSERT_TRUE(seg.contains(k)) << k;
    EXPECT_EQ(seg["device"], 0);
    const int64_t total = seg["total_size"];
    reserved += total;
    EXPECT_EQ(seg["segment_type"], total == 2 * MiB ? "small" : "large");
    // Blocks tile the segment in address order (the viewer derives addresses this way).
    uint64_t addr = seg["address"];
    int64_t seg_alloc = 0, seg_req = 0;
    for (const json& b : seg["blocks"]) {
      EXPECT_EQ(b["address"].get<uint64_t>(), addr);
      addr += b["size"].get<uint64_t>();
      const std::string state = b["state"];
      ASSERT_TRUE(state == "active_allocated" || state == "inactive") << state;
      if (state == "active_allocated") {
        seg_alloc += b["size"].get<int64_t>();
        seg_req += b["requested_size"].get<int64_t>();
        EXPECT_LE(b["requested_size"].get<int64_t>(), b["size"].get<int64_t>());
        ASSERT_EQ(b["frames"].size(), 1u);
        block_names.insert(b["frames"][0]["name"].get<std::string>());
      }
    }
    EXPECT_EQ(addr, seg["address"].get<uint64_t>() + uint64_t(total));
    EXPECT_EQ(seg["allocated_size"], seg_alloc);
    EXPECT_EQ(seg["active_size"], seg_alloc);
    EXPECT_EQ(seg["requested_size"], seg_req);
    allocated += seg_alloc;
    requested += seg_req;
  }
  EXPECT_EQ(reserved, st.reserved_bytes.current);
  EXPECT_EQ(allocated, st.allocated_bytes.current);
  EXPECT_EQ(requested, st.requested_bytes.current);
  EXPECT_TRUE(block_names.count("init [parameter]"));
  EXPECT_TRUE(block_names.count("linear_backward [gradient]")) << "a live block shows its current category";
  EXPECT_TRUE(block_names.count("adamw [optimizer_state]"));

  // The trace: ordered, PyTorch's action names, categories and op names in frames, and replaying
  // it reproduces allocated and reserved bytes (the history covers the allocator's whole life).
  ASSERT_EQ(j["device_traces"].size(), 1u);
  const json& tr = j["device_traces"][0];
  const std::set<std::string> actions = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
                                         "oom", "snapshot"};
  int64_t last_t = -1, alloc_sum = 0, seg_sum = 0;
  std::set<std::string> cats, names;
  int allocs = 0;
  for (size_t i = 0; i < tr.size(); ++i) {
    const json& e = tr[i];
    const std::string act = e["action"];
    ASSERT_TRUE(actions.count(act)) << act;
    EXPECT_GE(e["time_us"].get<int64_t>(), last_t);
    last_t = e["time_us"];
    cats.insert(e["category"].get<std::string>());
    if (act == "alloc") {
      ++allocs;
      alloc_sum += e["size"].get<int64_t>();
      names.insert(e["frames"][0]["name"].get<std::string>());
    }
    if (act == "free_requested") {
      ASSERT_LT(i + 1, tr.size());
      EXPECT_EQ(tr[i + 1]["action"], "free_completed");
      EXPECT_EQ(tr[i + 1]["addr"], e["addr"]);
    }
    if (act == "free_completed") alloc_sum -= e["size"].get<int64_t>();
    if (act == "segment_alloc") seg_sum += e["size"].get<int64_t>();
    if (act == "segment_free") seg_sum -= e["size"].get<int64_t>();
  }
  EXPECT_EQ(allocs, 8);
  EXPECT_EQ(alloc_sum, st.allocated_bytes.current);
  EXPECT_EQ(seg_sum, st.reserved_bytes.current);
  for (int c = 0; c < kNumCategories; ++c)
    if (c != int(Category::Other)) EXPECT_TRUE(cats.count(category_name(Category(c)))) << category_name(Category(c));
  EXPECT_TRUE(cats.count("unknown")) << "the viewer needs 'unknown' among the categories";
  EXPECT_EQ(tr.back()["action"], "snapshot");
  EXPECT_TRUE(names.count("linear [activation]"));
  EXPECT_TRUE(names.count("linear_backward [gradient] (allocated as activation)"));
  EXPECT_EQ(j["leantrain"]["history_dropped"], 0);
  s.release(*a);
}

// CPU and plain meta allocators map a segment per block: the snapshot shows one each.
TEST(MemorySnapshot, SimpleAllocatorsGetOneSegmentPerBlock) {
  for (int which = 0; which < 2; ++which) {
    std::unique_ptr<Allocator> a;
    if (which == 0) a = std::make_unique<CpuAllocator>();
    else a = std::make_unique<MetaAllocator>();
    Scenario s;
    s.run(*a);  // history off: the layout is still complete
    json j = json::parse(snapshot(*a, SnapshotFormat::Json));
    const MemoryStats st = a->stats();
    int64_t reserved = 0;
    for (const json& seg : j["segments"]) {
      ASSERT_EQ(seg["blocks"].size(), 1u);
      EXPECT_EQ(seg["blocks"][0]["state"], "active_allocated");
      EXPECT_EQ(seg["blocks"][0]["address"], seg["address"]);
      reserved += seg["total_size"].get<int64_t>();
    }
    EXPECT_EQ(j["segments"].size(), s.live.size());
    EXPECT_EQ(reserved, st.reserved_bytes.current);
    EXPECT_EQ(reserved, st.allocated_bytes.current);
    EXPECT_TRUE(j["device_traces"][0].empty());
    s.release(*a);
  }
}

TEST(MemorySnapshot, PickleHoldsTheSameDocument) {
  auto a = make_simulated_cuda_allocator();
  a->set_history(true);
  Scenario s;
  s.run(*a);
  {
    OpNameScope os{"huge"};
    a->set_limit(a->stats().reserved_bytes.current);
    EXPECT_THROW(a->allocate(64 * MiB), OutOfMemoryError);
    a->set_limit(-1);
  }
  const MemoryState st = capture_memory_state(*a);
  json from_json = json::parse(memory_snapshot_string(st, SnapshotFormat::Json));
  lt::test::Unpickled u = lt::test::unpickle(memory_snapshot_string(st, SnapshotFormat::Pickle));
  EXPECT_EQ(u.value, from_json);
  // The OOM entry says what was asked, and has no address (as PyTorch's).
  bool oom = false;
  for (const json& e : from_json["device_traces"][0])
    if (e["action"] == "oom") {
      oom = true;
      EXPECT_FALSE(e.contains("addr"));
      EXPECT_EQ(e["size"], 64 * MiB);
      EXPECT_EQ(e["frames"][0]["name"], "huge [other]");
    }
  EXPECT_TRUE(oom);
  s.release(*a);
}

TEST(MemorySnapshot, CudaDeviceIndexPicksTheTraceSlot) {
  MemoryState st;
  st.device = Device::cuda(2);
  json j = json::parse(memory_snapshot_string(st, SnapshotFormat::Json));
  ASSERT_EQ(j["device_traces"].size(), 3u);
  EXPECT_TRUE(j["segments"].empty());
}

TEST(MemorySnapshot, FilesAreWrittenAtomically) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("lt-snap-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto a = make_simulated_cuda_allocator();
  a->set_history(true);
  Scenario s;
  s.run(*a);
  write_memory_snapshot(*a, (dir / "m.json").string());
  write_memory_snapshot_pickle(*a, (dir / "m.pickle").string());
  std::ifstream jf(dir / "m.json");
  json j = json::parse(jf);
  std::ifstream pf(dir / "m.pickle", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(pf)), std::istreambuf_iterator<char>());
  EXPECT_EQ(lt::test::unpickle(bytes).value, j);
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 2) << "no temp files left behind";
  EXPECT_THROW(write_memory_snapshot(*a, (dir / "missing" / "m.json").string()), Error);
  fs::remove_all(dir);
  s.release(*a);
}

}  // namespace
}  // namespace lt
