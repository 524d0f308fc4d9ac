// The one rule every on/off switch of the environment follows (core/env_flag.h): unset or empty
// keeps the default, a value beginning with '0' is off, any other value is on.
#include <gtest/gtest.h>

#include <cstdlib>

#include "core/env_flag.h"

namespace {

constexpr const char* kName = "LEANTRAIN_TEST_ENV_FLAG";

bool flag_with(const char* value, bool fallback) {
  if (value) setenv(kName, value, 1);
  else unsetenv(kName);
  const bool on = lt::env_flag(kName, fallback);
  unsetenv(kName);
  return on;
}

TEST(EnvFlag, UnsetOrEmptyKeepsTheDefault) {
  EXPECT_TRUE(flag_with(nullptr, true));
  EXPECT_FALSE(flag_with(nullptr, false));
  EXPECT_TRUE(flag_with("", true));
  EXPECT_FALSE(flag_with("", false));
}

TEST(EnvFlag, ZeroTurnsOffAnythingElseTurnsOn) {
  for (bool fallback : {true, false}) {
    EXPECT_FALSE(flag_with("0", fallback));
    EXPECT_FALSE(flag_with("00", fallback));
    EXPECT_TRUE(flag_with("1", fallback));
    EXPECT_TRUE(flag_with("2", fallback));
    EXPECT_TRUE(flag_with("yes", fallback));
  }
}

}  // namespace
