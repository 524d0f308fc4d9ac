// The CLI's error contract: one line "leantrain: error: ...", exit 2 for usage, 1 for runtime.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "cli/cli.h"

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
std::pair<int, std::string> reported(const std::exception& e) {
  std::FILE* f = std::tmpfile();
  int code = cli::report(e, f);
  std::string s = read_all(f);
  std::fclose(f);
  return {code, s};
}
}  // namespace

TEST(TrainCli, ErrorsAreOneLineWithExitCodes) {
  auto [c1, s1] = reported(UsageError("--batch 10 is not divisible by --micro-batch 4", "why", "fix"));
  EXPECT_EQ(c1, 2);
  EXPECT_EQ(s1, "leantrain: error: --batch 10 is not divisible by --micro-batch 4: why (fix)\n");
  auto [c2, s2] = reported(NumericError("loss is NaN at step 3", "diverged", "lower --lr"));
  EXPECT_EQ(c2, 1);
  EXPECT_EQ(s2, "leantrain: error: loss is NaN at step 3: diverged (lower --lr)\n");
  auto [c3, s3] = reported(Error("bad file", "line one\nline two", "fix it"));
  EXPECT_EQ(c3, 1);
  EXPECT_EQ(s3, "leantrain: error: bad file: line one line two (fix it)\n");  // still one line
  auto [c4, s4] = reported(std::logic_error("oops"));
  EXPECT_EQ(c4, 1);
  EXPECT_EQ(s4, "leantrain: error: internal error: oops (please report this as a bug)\n");
}

TEST(TrainCli, ParseErrorsNameTheFlag) {
  RunConfig cfg;
  CLI::App app("t", "leantrain");
  auto* train = app.add_subcommand("train");
  cli::add_train_flags(*train, cfg);
  const char* argv[] = {"leantrain", "train", "--no-such-flag", "3"};
  std::FILE* f = std::tmpfile();
  int code = 0;
  try {
    app.parse(4, const_cast<char**>(argv));
  } catch (const CLI::ParseError& e) {
    code = cli::report_parse_error(e, "train", f);
  }
  std::string s = read_all(f);
  std::fclose(f);
  EXPECT_EQ(code, 2);
  EXPECT_EQ(s.rfind("leantrain: error: unknown flag '--no-such-flag'", 0), 0u) << s;
  EXPECT_EQ(std::count(s.begin(), s.end(), '\n'), 1);
}

TEST(TrainCli, FlagsFillTheConfig) {
  RunConfig cfg;
  CLI::App app("t", "leantrain");
  auto* train = app.add_subcommand("train");
  cli::add_train_flags(*train, cfg);
  const char* argv[] = {"leantrain", "train", "--model", "gpt2-tiny", "--batch", "32", "--micro-batch", "8",
                        "--lr", "3e-4", "--optimizer", "sgd", "--schedule", "constant", "--device", "cpu"};
  app.parse(16, const_cast<char**>(argv));
  EXPECT_EQ(cfg.model, "gpt2-tiny");
  EXPECT_EQ(cfg.batch, 32);
  EXPECT_EQ(cfg.micro_batch, 8);
  EXPECT_DOUBLE_EQ(cfg.lr, 3e-4);
  EXPECT_EQ(cfg.optimizer, OptimizerKind::Sgd);
  EXPECT_EQ(cfg.schedule, ScheduleKind::Constant);
  EXPECT_EQ(cfg.epochs, RunConfig{}.epochs);  // untouched flags keep their defaults
}
