// What the tests of refusals compare: the one-line lt::Error message of f(), or "" when f() does
// not throw (any other exception escapes and fails the test).
#pragma once
#include <string>

#include "leantrain/error.h"

namespace lt::test {

template <class F> std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace lt::test
