// A mistake in how leantrain was asked to run (bad flag value, bad combination, a malformed
// LEANTRAIN_* knob): exit code 2. Its own header, below train, so that core (the knob parser) and
// dist (the launcher's checks) can throw it without including the training run's API.
#pragma once
#include "leantrain/error.h"

namespace lt {

class UsageError : public Error {
 public:
  using Error::Error;
};

// Throws UsageError(what, why, fix): the one helper the run's checks share (a file-local copy of
// it in each would clash in CI's unity build).
[[noreturn]] inline void usage(std::string what, std::string why, std::string fix) {
  throw UsageError(std::move(what), std::move(why), std::move(fix));
}

}  // namespace lt
