#include "leantrain/error.h"

namespace lt {

static std::string join(const std::string& what, const std::string& why, const std::string& fix) {
  std::string s = what;
  if (!why.empty()) s += ": " + why;
  if (!fix.empty()) s += " (" + fix + ")";
  return s;
}

Error::Error(std::string what, std::string why, std::string fix)
    : std::runtime_error(join(what, why, fix)), what_(std::move(what)), why_(std::move(why)), fix_(std::move(fix)) {}

void fail(std::string what, std::string why, std::string fix) {
  throw Error(std::move(what), std::move(why), std::move(fix));
}

}  // namespace lt
