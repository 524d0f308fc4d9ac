// Backend's defaults: every op of backend_ops.def fails with one line naming backend and op
// (a backend implements an op by overriding it).
#include "backend/backend.h"

#include <string>

#include "leantrain/error.h"

namespace lt {

[[noreturn]] static void missing_op(const Backend& b, const char* op) {
  const std::string backend = b.name();
  fail("backend '" + backend + "' has no op '" + op + "'", "the " + backend + " backend does not implement it",
       "use --device cpu, whose backend has every op, or implement " + std::string(op) + " in the " + backend +
           " backend");
}

#define LT_BACKEND_OP(group, ret, op, params, args) \
  ret Backend::op params { missing_op(*this, #op); }
#include "backend/backend_ops.def"

}  // namespace lt
