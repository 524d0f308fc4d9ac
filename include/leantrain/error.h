// Errors carry three parts: what went wrong, why, and what to change. The CLI prints them
// as one line; nothing in the engine calls abort() on a user error.
#pragma once
#include <stdexcept>
#include <string>

namespace lt {

class Error : public std::runtime_error {
 public:
  Error(std::string what, std::string why, std::string fix);
  const std::string& what_part() const { return what_; }
  const std::string& why() const { return why_; }
  const std::string& fix() const { return fix_; }

 private:
  std::string what_, why_, fix_;
};

// Thrown when an allocator cannot satisfy a request; the message carries the breakdown.
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

// Thrown when a loss or gradient becomes NaN/inf where that is fatal.
class NumericError : public Error {
 public:
  using Error::Error;
};

[[noreturn]] void fail(std::string what, std::string why, std::string fix = "");

}  // namespace lt

#define LT_CHECK(cond, what, why, fix)                 \
  do {                                                 \
    if (!(cond)) ::lt::fail((what), (why), (fix));     \
  } while (0)

// Internal invariant: a bug in leantrain, not a user error.
#define LT_ASSERT(cond)                                                                        \
  do {                                                                                         \
    if (!(cond))                                                                               \
      ::lt::fail(std::string("internal error at ") + __FILE__ + ":" + std::to_string(__LINE__), \
                 "assertion '" #cond "' failed", "please report this as a bug");              \
  } while (0)
