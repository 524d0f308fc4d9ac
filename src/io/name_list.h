#pragma once
// How an error names a list of tensor names: the first one, and how many more.
#include <string>
#include <vector>

namespace lt::io {

// "'a'" or "'a' (and 3 more)". `names` is not empty.
inline std::string first_of(const std::vector<std::string>& names) {
  std::string s = "'" + names.front() + "'";
  if (names.size() > 1) s += " (and " + std::to_string(names.size() - 1) + " more)";
  return s;
}

}  // namespace lt::io
