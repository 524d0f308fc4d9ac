// A LEANTRAIN_* knob set for a scope (the knobs are read from the environment when they act).
#pragma once

#include <cstdlib>

namespace lt::test {

struct KnobEnv {
  const char* name;
  KnobEnv(const char* n, const char* v) : name(n) { ::setenv(n, v, 1); }
  ~KnobEnv() { ::unsetenv(name); }
  KnobEnv(const KnobEnv&) = delete;
  KnobEnv& operator=(const KnobEnv&) = delete;
};

}  // namespace lt::test
