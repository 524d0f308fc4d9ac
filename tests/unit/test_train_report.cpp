// The printed reports: memory table rows, progress lines (TTY and plain), durations and sizes.
#include <gtest/gtest.h>

#include <cstdio>

#include "leantrain/ops.h"
#include "leantrain/train.h"
#include "train/progress.h"

using namespace lt;

namespace {
std::string read_all(std::FILE* f) {
  std::rewind(f);
  std::string s;
  char buf[512];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  return s;
}
int count(const std::string& s, const std::string& needle) {
  int n = 0;
  for (size_t p = s.find(needle); p != std::string::npos; p = s.find(needle, p + 1)) ++n;
  return n;
}
}  // namespace

TEST(TrainReport, FormatBytesAndDuration) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(3 * 1024 * 1024), "3.00 MiB");
  EXPECT_EQ(format_duration(12.34), "12.3s");
  EXPECT_EQ(format_duration(65), "1m05s");
  EXPECT_EQ(format_duration(3 * 3600 + 120), "3h02m");
}

TEST(TrainReport, MemorySummaryHasEveryRowAndCategory) {
  Tensor p, g;
  {
    MemoryCategoryScope s(Category::Parameter);
    p = zeros({1024}, DType::F32, Device::cpu());  // 4 KiB under parameter
  }
  std::string t = memory_summary(Device::cpu());
  for (const char* row : {"Allocated memory", "Reserved memory", "Requested memory", "parameter", "gradient",
                          "optimizer_state", "activation", "input", "workspace", "other", "Current", "Peak"})
    EXPECT_NE(t.find(row), std::string::npos) << row << "\n" << t;
  // Every line has the same width, so the table stays aligned.
  size_t width = t.find('\n');
  for (size_t start = 0; start < t.size();) {
    size_t end = t.find('\n', start);
    EXPECT_EQ(end - start, width) << t.substr(start, end - start);
    start = end + 1;
  }
  EXPECT_NE(t.find("parameter"), std::string::npos);
  size_t row = t.find("  parameter");
  std::string line = t.substr(row, t.find('\n', row) - row);
  EXPECT_NE(line.find("KiB"), std::string::npos) << line;
}

TEST(TrainReport, PlainProgressPrintsPeriodicLines) {
  std::FILE* f = std::tmpfile();
  {
    ProgressPrinter pp(f, /*tty=*/false, /*every=*/5);
    ProgressInfo p;
    p.total_steps = 12;
    for (int s = 1; s <= 12; ++s) {
      p.step = s;
      p.loss = 1.0 / s;
      pp.step(p);
    }
    pp.eval(EvalInfo{12, 0.5, 0.875});
  }
  std::string out = read_all(f);
  std::fclose(f);
  EXPECT_EQ(count(out, "\n"), 5) << out;  // steps 1, 5, 10, 12 and the eval line
  EXPECT_EQ(count(out, "\r"), 0);
  EXPECT_NE(out.find("step 12/12"), std::string::npos);
  EXPECT_NE(out.find("test accuracy 87.50%"), std::string::npos) << out;
}

TEST(TrainReport, TerminalProgressRedrawsOneLine) {
  std::FILE* f = std::tmpfile();
  {
    ProgressPrinter pp(f, /*tty=*/true, 0);
    ProgressInfo p;
    p.total_steps = 3;
    for (int s = 1; s <= 3; ++s) {
      p.step = s;
      pp.step(p);
    }
  }
  std::string out = read_all(f);
  std::fclose(f);
  EXPECT_EQ(count(out, "\n"), 1) << out;  // only the final newline
  EXPECT_GE(count(out, "\r\033[K"), 2);
  EXPECT_NE(out.find("step 3/3"), std::string::npos);
}

TEST(TrainReport, ProgressLineContents) {
  ProgressInfo p;
  p.step = 50;
  p.total_steps = 200;
  p.loss = 0.4321;
  p.items_per_s = 1234;
  p.unit = "tok/s";
  p.eta_s = 90;
  p.mem_current = 2 * 1024 * 1024;
  p.mem_peak = 5 * 1024 * 1024;
  std::string s = ProgressPrinter::format(p);
  for (const char* part : {"step  50/200", "25%", "loss 0.4321", "1234 tok/s", "ETA 1m30s", "mem 2.00 MiB", "peak 5.00 MiB"})
    EXPECT_NE(s.find(part), std::string::npos) << part << " in " << s;
}
