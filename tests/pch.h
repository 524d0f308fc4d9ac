// The unit tests' precompiled header (CMakeLists.txt, LEANTRAIN_PCH): what most test files include,
// parsed once per build instead of once per file (about half of a test file's compile). Tests only:
// the library is compiled without it, so a missing #include there still fails the build, and
// scripts/check_layers.py still sees every include the library makes.
// Only headers that need no macro defined before them belong here (a file that defines one first,
// as test_hostile_inputs.cpp does for pcre2.h, includes that header itself, after the PCH).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "leantrain/autograd.h"
#include "leantrain/error.h"
#include "leantrain/memory.h"
#include "leantrain/models.h"
#include "leantrain/ops.h"
