// The knob registry (core/knobs.h): one table, one parser. Unset or empty keeps the default; a
// malformed value or an unknown LEANTRAIN_* name is a one-line UsageError naming the variable.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "core/knobs.h"
#include "leantrain/usage_error.h"

namespace lt {
namespace {

// Sets `name` to `value` (null: unset) for the scope, then restores what was there.
class EnvScope {
 public:
  EnvScope(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~EnvScope() {
    if (had_) ::setenv(name_, old_.c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

std::string usage_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(Knobs, TableIsWellFormed) {
  std::set<std::string> names;
  for (const Knob& k : knob_table()) {
    EXPECT_TRUE(names.insert(k.name).second) << k.name << " declared twice";
    EXPECT_EQ(std::string(k.name).rfind("LEANTRAIN_", 0), 0u) << k.name;
    EXPECT_NO_THROW(parse_knob(k, k.fallback)) << k.name << ": its default does not parse";
    EXPECT_GT(std::string(k.what).size(), 10u) << k.name << " says nothing about what it changes";
  }
  EXPECT_EQ(find_knob("LEANTRAIN_NO_SUCH_KNOB"), nullptr);
}

TEST(Knobs, UnsetOrEmptyKeepsTheDefault) {
  {
    EnvScope e("LEANTRAIN_GEMM_GELU", nullptr);
    EXPECT_TRUE(knob_on("LEANTRAIN_GEMM_GELU"));
  }
  {
    EnvScope e("LEANTRAIN_GEMM_TUNE", "");
    EXPECT_FALSE(knob_on("LEANTRAIN_GEMM_TUNE"));
  }
  EnvScope e("LEANTRAIN_PEER_CHUNK_MB", nullptr);
  EXPECT_EQ(knob_int("LEANTRAIN_PEER_CHUNK_MB"), 16);
  EXPECT_EQ(knob_choice("LEANTRAIN_DISK_IO"), "uring");
}

TEST(Knobs, SwitchesTakeZeroOneAndTheirWords) {
  for (const char* off : {"0", "off", "false", "no", "OFF"}) {
    EnvScope e("LEANTRAIN_GEMM_GELU", off);
    EXPECT_FALSE(knob_on("LEANTRAIN_GEMM_GELU")) << off;
  }
  for (const char* on : {"1", "on", "true", "yes", "Yes"}) {
    EnvScope e("LEANTRAIN_GEMM_TUNE", on);
    EXPECT_TRUE(knob_on("LEANTRAIN_GEMM_TUNE")) << on;
  }
  EnvScope e("LEANTRAIN_GEMM_GELU", "2");
  EXPECT_EQ(usage_error_of([] { knob_on("LEANTRAIN_GEMM_GELU"); }),
            "LEANTRAIN_GEMM_GELU='2': not an on/off value (set it to 0 or 1, or unset it; `leantrain knobs` lists every knob)");
}

TEST(Knobs, IntegersAreWholeAndInRange) {
  {
    EnvScope e("LEANTRAIN_PEER_CHUNK_MB", "50");
    EXPECT_EQ(knob_int("LEANTRAIN_PEER_CHUNK_MB"), 50);
  }
  for (const char* bad : {"25MB", "abc", "2.5", "0", "-1", "99999999999999999999"}) {
    EnvScope e("LEANTRAIN_PEER_CHUNK_MB", bad);
    const std::string msg = usage_error_of([] { knob_int("LEANTRAIN_PEER_CHUNK_MB"); });
    EXPECT_NE(msg.find(std::string("LEANTRAIN_PEER_CHUNK_MB='") + bad + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[1, 1024]"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
  }
}

TEST(Knobs, ChoicesAreOneOfTheirWords) {
  {
    EnvScope e("LEANTRAIN_DISK_IO", "threads");
    EXPECT_EQ(knob_choice("LEANTRAIN_DISK_IO"), "threads");
  }
  EnvScope e("LEANTRAIN_DISK_IO", "aio");
  EXPECT_NE(usage_error_of([] { knob_choice("LEANTRAIN_DISK_IO"); }).find("not one of uring|threads"),
            std::string::npos);
}

TEST(Knobs, TheEnvironmentCheckRefusesUnknownNamesAndBadValues) {
  std::string a = "PATH=/bin", b = "LEANTRAIN_GEMM_GELU=0", c = "LEANTRAIN_CUDA=OFF", d = "LEANTRAIN_STORE_FD=5",
              t = "LEANTRAIN_STDOUT_IS_TERMINAL=1";  // the launcher sets it for its ranks
  std::vector<char*> env = {a.data(), b.data(), c.data(), d.data(), t.data(), nullptr};
  EXPECT_NO_THROW(check_knob_environment(env.data()));  // build-script and internal names are known too
  std::string typo = "LEANTRAIN_GEMM_GELUE=0";
  env.insert(env.begin() + 1, typo.data());
  EXPECT_EQ(usage_error_of([&] { check_knob_environment(env.data()); }),
            "environment variable LEANTRAIN_GEMM_GELUE: leantrain has no such knob (unset it or fix its name; `leantrain "
            "knobs` lists every knob)");
  std::string bad = "LEANTRAIN_ATTN_FWD_MT=3";
  std::vector<char*> env2 = {bad.data(), nullptr};
  EXPECT_NE(usage_error_of([&] { check_knob_environment(env2.data()); }).find("outside [1, 2]"), std::string::npos);
}

TEST(Knobs, ChangedOnesGoToTheHeaderAndTheMetrics) {
  EnvScope a("LEANTRAIN_GEMM_GELU", "off"), b("LEANTRAIN_PEER_CHUNK_MB", "16"), c("LEANTRAIN_DISK_IO", "threads");
  // PEER_CHUNK_MB is at its default: not listed. Values are canonical ("off" -> "0").
  bool gelu = false, bucket = false, disk = false;
  for (const auto& [name, value] : knobs_changed()) {
    gelu |= name == "LEANTRAIN_GEMM_GELU" && value == "0";
    bucket |= name == "LEANTRAIN_PEER_CHUNK_MB";
    disk |= name == "LEANTRAIN_DISK_IO" && value == "threads";
  }
  EXPECT_TRUE(gelu);
  EXPECT_FALSE(bucket);
  EXPECT_TRUE(disk);
  EXPECT_NE(knobs_header().find("LEANTRAIN_GEMM_GELU=0"), std::string::npos) << knobs_header();
  EXPECT_NE(knobs_json().find("\"LEANTRAIN_DISK_IO\": \"threads\""), std::string::npos) << knobs_json();
  EXPECT_NE(knobs_listing().find("LEANTRAIN_PEER_REDUCE"), std::string::npos);
}

TEST(Knobs, KnobsThatBecameFlagsNameTheirFlag) {
  for (auto [entry, flag] : {std::pair{"LEANTRAIN_BUCKET_MB=50", "--bucket-mb"}, {"LEANTRAIN_DIST_TIMEOUT=5", "--dist-timeout"},
                             {"LEANTRAIN_FSDP_GATHER=f32", "--fsdp-gather"}, {"LEANTRAIN_BUCKETS_IN_FLIGHT=4", "--buckets-in-flight"}}) {
    std::string e = entry;
    std::vector<char*> env = {e.data(), nullptr};
    const std::string msg = usage_error_of([&] { check_knob_environment(env.data()); });
    EXPECT_NE(msg.find("it is a flag now"), std::string::npos) << msg;
    EXPECT_NE(msg.find(flag), std::string::npos) << msg;
  }
}

TEST(Knobs, NoneChangedMeansAnEmptyHeader) {
  for (const Knob& k : knob_table())
    if (std::getenv(k.name)) GTEST_SKIP() << k.name << " is set in this environment";
  EXPECT_EQ(knobs_header(), "");
  EXPECT_EQ(knobs_json(), "{}");
}

}  // namespace
}  // namespace lt
