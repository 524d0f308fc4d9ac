// Numeric flags: decimal values inside the flag's range pass exactly; a value that does not fit
// the type, lies outside the range or is not a number is a UsageError naming the flag, the range
// and the unit (CLI11 alone clamped 99999999999999999999 to INT64_MAX and read 010 as octal).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <functional>

#include "cli/cli.h"

using namespace lt;

namespace {

std::string usage_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

// Parses `train ARGS...` into a RunConfig; returns the one error line ("" when it parsed).
std::string parse_train(std::vector<const char*> args, RunConfig& cfg) {
  CLI::App app("t", "leantrain");
  auto* train = app.add_subcommand("train");
  cli::add_train_flags(*train, cfg);
  args.insert(args.begin(), {"leantrain", "train"});
  std::FILE* f = std::tmpfile();
  try {
    app.parse(int(args.size()), const_cast<char**>(args.data()));
  } catch (const CLI::ParseError& e) {
    cli::report_parse_error(e, "train", f);
  } catch (const std::exception& e) {
    cli::report(e, f);
  }
  std::rewind(f);
  char buf[1024] = {};
  std::string s(buf, std::fread(buf, 1, sizeof buf - 1, f));
  std::fclose(f);
  return s;
}

}  // namespace

TEST(NumberFlags, IntegersInRange) {
  const IntRange& r = flag_range::steps;
  EXPECT_EQ(cli::parse_int_flag(r, "0"), 0);
  EXPECT_EQ(cli::parse_int_flag(r, "+200"), 200);
  EXPECT_EQ(cli::parse_int_flag(r, "010"), 10);  // decimal, not octal
  EXPECT_EQ(cli::parse_int_flag(r, "1e6"), 1000000);
  EXPECT_EQ(cli::parse_int_flag(r, "2.5e3"), 2500);
  EXPECT_EQ(cli::parse_int_flag(r, "1000000000000"), flag_range::kSteps);
  EXPECT_EQ(cli::parse_int_flag(flag_range::warmup, "-1"), -1);
}

TEST(NumberFlags, IntegersOutOfRangeOrNotWhole) {
  const IntRange& r = flag_range::steps;
  for (const char* v : {"99999999999999999999", "-99999999999999999999", "1000000000001", "-1", "1e300", "1e99999"})
    EXPECT_NE(usage_of([&] { cli::parse_int_flag(r, v); })
                  .find(std::string("--steps ") + v + " is out of range: --steps takes 0 to 1000000000000 optimizer steps"),
              std::string::npos)
        << v;
  for (const char* v : {"abc", "1.5", "0x10", "inf", "nan", "", "1e", "--5"})
    EXPECT_NE(usage_of([&] { cli::parse_int_flag(r, v); }).find("is not a whole number"), std::string::npos) << v;
}

TEST(NumberFlags, RealsAndSeeds) {
  // Rounded once, from the text, as the compiler reads a literal (not via long double).
  for (const char* v : {"3e-4", "0.1", "0.9999999999999999", "2.2250738585072014e-308"})
    EXPECT_EQ(cli::parse_real_flag("--lr", v), std::strtod(v, nullptr)) << v;
  EXPECT_EQ(cli::parse_real_flag("--lr", "3e-4"), 3e-4);
  EXPECT_NE(usage_of([] { cli::parse_real_flag("--lr", "1e999"); }).find("--lr 1e999 is out of range"), std::string::npos);
  EXPECT_NE(usage_of([] { cli::parse_real_flag("--lr", "inf"); }).find("--lr inf is not a number"), std::string::npos);
  EXPECT_NE(usage_of([] { cli::parse_real_flag("--lr", "nan"); }), "");
  EXPECT_NE(usage_of([] { cli::parse_real_flag("--epochs", "1e300", &flag_range::epochs); })
                .find("--epochs takes 0 to 1e6 passes over the training data"),
            std::string::npos);
  EXPECT_EQ(cli::parse_seed_flag("--seed", "18446744073709551615"), UINT64_MAX);
  EXPECT_NE(usage_of([] { cli::parse_seed_flag("--seed", "18446744073709551616"); }).find("is out of range"),
            std::string::npos);
  EXPECT_NE(usage_of([] { cli::parse_seed_flag("--seed", "-1"); }).find("--seed -1 is out of range"), std::string::npos);
}

TEST(NumberFlags, TrainCommandLine) {
  RunConfig cfg;
  EXPECT_EQ(parse_train({"--steps", "1e3", "--seed", "12345678901234567", "--epochs", "0.5"}, cfg), "");
  EXPECT_EQ(cfg.steps, 1000);
  EXPECT_EQ(cfg.seed, 12345678901234567u);
  EXPECT_DOUBLE_EQ(cfg.epochs, 0.5);
  RunConfig c2;
  EXPECT_EQ(parse_train({"--steps", "99999999999999999999"}, c2),
            "leantrain: error: --steps 99999999999999999999 is out of range: --steps takes 0 to 1000000000000 "
            "optimizer steps (pass a value in that range)\n");
  RunConfig c3;
  EXPECT_EQ(parse_train({"--steps", "1", "--steps", "2"}, c3),
            "leantrain: error: --steps is given 2 times: it takes one value (give --steps once)\n");
  RunConfig c4;
  EXPECT_NE(parse_train({"--dim", "4294967296"}, c4).find("--dim 4294967296 is out of range: --dim takes 0 to 1048576 channels"),
            std::string::npos);
}

TEST(NumberFlags, ValidateChecksConfigsFromElsewhere) {
  // A RunConfig from a checkpoint's JSON or the API goes through the same ranges.
  RunConfig c;
  c.steps = int64_t(1) << 62;
  EXPECT_NE(usage_of([&] { validate(c); }).find("--steps 4611686018427387904 is out of range"), std::string::npos);
  RunConfig e;
  e.epochs = 0;
  EXPECT_NE(usage_of([&] { validate(e); }).find("--epochs 0: nothing to train"), std::string::npos);
  e.steps = 5;  // with --steps, --epochs is not used
  e.device = "cpu";
  EXPECT_EQ(usage_of([&] { validate(e); }), "");
  RunConfig d;
  d.depth = 100000;
  EXPECT_NE(usage_of([&] { validate(d); }).find("--depth takes 0 to 4096 blocks"), std::string::npos);
}
