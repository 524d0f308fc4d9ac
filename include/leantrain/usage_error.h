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

}  // namespace lt
