// The memory timeline (reconstruction, downsampling) and the HTML report built on it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "leantrain/memory_snapshot.h"
#include "memory/host_allocators.h"
#include "memory/memory_timeline.h"
#include "memory/snapshot.h"
#include "plan/memory_report_html.h"

namespace lt {
namespace {

constexpr int64_t MiB = 1 << 20;
using Action = MemoryEvent::Action;

MemoryEvent ev(Action a, uint64_t addr, int64_t size, Category c, const char* op) {
  return MemoryEvent{a, addr, size, size, c, 0, op};
}

// Stats at the end of a synthetic history that started from nothing.
MemoryStats end_stats(const std::vector<MemoryEvent>& h) {
  MemoryStats s;
  for (const MemoryEvent& e : h) {
    if (e.action == Action::Alloc) s.category[size_t(e.category)].increase(e.size);
    if (e.action == Action::Free) s.category[size_t(e.category)].decrease(e.size);
    if (e.action == Action::SegmentAlloc) s.reserved_bytes.increase(e.size);
    if (e.action == Action::SegmentFree) s.reserved_bytes.decrease(e.size);
  }
  return s;
}

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

// A long sawtooth of small activations with one 50 MiB spike in the middle.
std::vector<MemoryEvent> sawtooth(size_t n, size_t spike_at) {
  std::vector<MemoryEvent> h;
  h.push_back(ev(Action::SegmentAlloc, 1, 100 * MiB, Category::Parameter, "init"));
  h.push_back(ev(Action::Alloc, 1, 8 * MiB, Category::Parameter, "init"));
  uint64_t addr = 100;
  while (h.size() < n) {
    if (h.size() == spike_at) {
      h.push_back(ev(Action::Alloc, 99, 50 * MiB, Category::Activation, "spike"));
      h.push_back(ev(Action::Free, 99, 50 * MiB, Category::Activation, "spike"));
      continue;
    }
    for (int i = 0; i < 4; ++i) h.push_back(ev(Action::Alloc, addr + uint64_t(i), 64 * 1024, Category::Activation, "act"));
    for (int i = 0; i < 4; ++i) h.push_back(ev(Action::Free, addr + uint64_t(i), 64 * 1024, Category::Activation, "act"));
    addr += 4;
  }
  return h;
}

TEST(MemoryTimeline, DownsamplingKeepsThePeak) {
  const std::vector<MemoryEvent> h = sawtooth(200000, 123458);
  const MemoryTimeline t = build_memory_timeline(h, end_stats(h), 500);
  ASSERT_EQ(t.points.size(), 500u);
  EXPECT_EQ(t.states, h.size() + 1);
  EXPECT_EQ(t.peak_allocated, 58 * MiB);
  EXPECT_EQ(t.peak_state, 123459u);  // right after the spike's alloc
  EXPECT_STREQ(t.peak_op, "spike");
  EXPECT_EQ(t.points[t.peak_point].state, t.peak_state);
  EXPECT_EQ(t.points[t.peak_point].total(), t.peak_allocated);
  EXPECT_EQ(t.reserved_max, 100 * MiB);
  EXPECT_EQ(t.category_max[size_t(Category::Activation)], 50 * MiB);
  uint64_t next = 0;
  for (const TimelinePoint& p : t.points) {
    EXPECT_EQ(p.first, next);
    EXPECT_LE(p.first, p.state);
    EXPECT_LE(p.state, p.last);
    EXPECT_LE(p.total(), t.peak_allocated);
    // Each point shows the most of its stretch: the sawtooth tops out at 8 MiB + 4 x 64 KiB.
    if (&p != &t.points[t.peak_point] && p.first > 0) EXPECT_EQ(p.total(), 8 * MiB + 4 * 64 * 1024);
    next = p.last + 1;
  }
  EXPECT_EQ(next, t.states);
  EXPECT_TRUE(t.consistent);
}

TEST(MemoryTimeline, ShortHistoryKeepsEveryState) {
  const std::vector<MemoryEvent> h = sawtooth(50, 10);
  const MemoryTimeline t = build_memory_timeline(h, end_stats(h), 1000);
  ASSERT_EQ(t.points.size(), h.size() + 1);
  for (size_t i = 0; i < t.points.size(); ++i) EXPECT_EQ(t.points[i].state, i);
  EXPECT_EQ(t.points[0].total(), 0);
  EXPECT_EQ(t.points[2].bytes[size_t(Category::Parameter)], 8 * MiB);
}

// With the ring dropping old events, the start is rebuilt from today's stats; retags move bytes.
TEST(MemoryTimeline, StartIsReconstructedFromStats) {
  MetaAllocator a;
  std::vector<Block> keep;
  {
    MemoryCategoryScope p{Category::Parameter};
    keep.push_back(a.allocate(4 * MiB));  // before recording
  }
  a.set_history(true);
  a.set_history_max_entries(6);
  Block tmp;
  {
    MemoryCategoryScope c{Category::Activation};
    for (int i = 0; i < 5; ++i) a.deallocate(a.allocate(MiB));  // 20 events, 14 of them dropped
    tmp = a.allocate(2 * MiB);
  }
  a.retag(tmp, Category::Gradient);
  const std::vector<MemoryEvent> h = a.history();
  ASSERT_EQ(h.size(), 6u);
  const MemoryTimeline t = build_memory_timeline(h, a.stats(), 1000);
  EXPECT_TRUE(t.consistent);
  EXPECT_EQ(t.points.front().bytes[size_t(Category::Parameter)], 4 * MiB);
  const TimelinePoint& last = t.points.back();
  EXPECT_EQ(last.bytes[size_t(Category::Gradient)], 2 * MiB);
  EXPECT_EQ(last.bytes[size_t(Category::Activation)], 0);
  EXPECT_EQ(last.total(), a.stats().allocated_bytes.current);
  EXPECT_EQ(last.reserved, a.stats().reserved_bytes.current);
  a.deallocate(tmp);
  for (const Block& b : keep) a.deallocate(b);
}

MemoryState scenario_state(Allocator& a, std::vector<Block>& live) {
  auto alloc = [&](Category c, const char* op, int64_t n) {
    MemoryCategoryScope cs{c};
    OpNameScope os{op};
    return a.allocate(n);
  };
  live.push_back(alloc(Category::Parameter, "init", 3 * MiB));
  Block act = alloc(Category::Activation, "linear", 5 * MiB);
  live.push_back(alloc(Category::Gradient, "linear_backward", 3 * MiB));
  live.push_back(alloc(Category::OptimizerState, "adamw", 6 * MiB));
  live.push_back(alloc(Category::Input, "loader", 4096));
  a.deallocate(act);
  live.push_back(alloc(Category::Workspace, "gemm", 700 * 1024));
  return capture_memory_state(a);
}

TEST(MemoryReport, HtmlHasAPathPerCategoryAndThePeak) {
  auto a = make_simulated_cuda_allocator();
  a->set_history(true);
  std::vector<Block> live;
  const MemoryState st = scenario_state(*a, live);
  const std::string html = render_memory_report_html(st, "run <1> & co");
  for (int c = 0; c < kNumCategories; ++c) {
    const std::string tag = std::string("<path class=\"area\" data-category=\"") + category_name(Category(c)) + "\"";
    EXPECT_EQ(count(html, tag), 1) << category_name(Category(c));
    // And in the legend and the table.
    EXPECT_GE(count(html, std::string("</i>") + category_name(Category(c)) + "<"), 2) << category_name(Category(c));
  }
  EXPECT_EQ(count(html, "<path "), kNumCategories + 1);
  EXPECT_EQ(count(html, "<path class=\"reserved\""), 1);
  // Peak: 3 MiB + 5 MiB + 3 MiB + 6 MiB + 4 KiB, reached by the loader's allocation.
  const int64_t peak = 17 * MiB + 4096;
  EXPECT_EQ(st.stats.allocated_bytes.peak, peak);
  EXPECT_EQ(count(html, "<g id=\"peak-marker\" data-bytes=\"" + std::to_string(peak) + "\""), 1);
  EXPECT_EQ(count(html, "data-op=\"loader\""), 1);
  EXPECT_EQ(count(html, "peak 17.00 MiB at event"), 1);
  EXPECT_EQ(count(html, "<table id=\"category-peaks\">"), 1);
  EXPECT_EQ(count(html, "<title>run &lt;1&gt; &amp; co</title>"), 1);
  EXPECT_EQ(count(html, "data-drawn=\"0\""), 1);  // the script flips it once drawn
  // Self-contained: nothing to fetch.
  EXPECT_EQ(count(html, "http"), 1) << "only the SVG namespace";
  EXPECT_EQ(count(html, "http://www.w3.org/2000/svg"), 1);
  for (const char* ref : {" src=", "<link", "@import", "url(", "</script>\n<script src"}) EXPECT_EQ(count(html, ref), 0) << ref;
  EXPECT_EQ(count(html, "<script"), 2);  // the data and the code
  EXPECT_EQ(count(html, "</script>"), 2) << "the embedded data never closes its script early";
  for (const Block& b : live) a->deallocate(b);
}

TEST(MemoryReport, LargeHistoriesStaySmall) {
  const std::vector<MemoryEvent> h = sawtooth(400000, 300002);
  MemoryState st;
  st.device = Device::cuda();
  st.history = h;
  st.stats = end_stats(h);
  const std::string html = render_memory_report_html(st, "big");
  EXPECT_LT(html.size(), 400u * 1024) << "downsampled to the chart's width";
  EXPECT_EQ(count(html, "data-bytes=\"" + std::to_string(58 * MiB) + "\""), 1);
  EXPECT_EQ(count(html, "data-op=\"spike\""), 1);
  EXPECT_EQ(count(html, "drawn as 1000 points"), 1);
  // Each area path has two vertices per point (top edge, then bottom edge back). Found without
  // std::regex: libstdc++'s matcher recurses once per character, and this 30 kB path overflows
  // the stack under AddressSanitizer (scripts/sanitize.sh).
  const size_t area = html.find("data-category=\"activation\" fill=\"#");
  ASSERT_NE(area, std::string::npos);
  const size_t d = html.find(" d=\"", area);
  ASSERT_NE(d, std::string::npos);
  ASSERT_EQ(html.find('>', area), html.find('>', d)) << "d belongs to the same element";
  const std::string path = html.substr(d + 4, html.find('"', d + 4) - (d + 4));
  EXPECT_EQ(count(path, "L") + 1, 2000);
}

TEST(MemoryReport, EmptyHistoryStillDraws) {
  CpuAllocator a;
  Block b;
  {
    MemoryCategoryScope p{Category::Parameter};
    b = a.allocate(MiB);
  }
  const std::string html = render_memory_report_html(capture_memory_state(a), "empty");
  EXPECT_EQ(count(html, "<path class=\"area\""), kNumCategories);
  EXPECT_EQ(count(html, "No allocation history was recorded"), 1);
  EXPECT_EQ(count(html, "data-bytes=\"" + std::to_string(MiB) + "\""), 1);
  a.deallocate(b);
}

TEST(MemoryReport, FileIsWritten) {
  namespace fs = std::filesystem;
  const fs::path p = fs::temp_directory_path() / ("lt-report-" + std::to_string(::getpid()) + ".html");
  auto a = make_simulated_cuda_allocator();
  a->set_history(true);
  std::vector<Block> live;
  scenario_state(*a, live);
  write_memory_report_html(*a, p.string(), "file");
  std::ifstream f(p);
  std::string html((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(count(html, "<path class=\"area\""), kNumCategories);
  EXPECT_EQ(html.substr(0, 15), "<!DOCTYPE html>");
  fs::remove(p);
  for (const Block& b : live) a->deallocate(b);
}

}  // namespace
}  // namespace lt
