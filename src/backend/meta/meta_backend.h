// The dry-run device: every kernel is a no-op, generated from backend_ops.def. Allocation happens
// in the op front-ends, so a step on meta makes exactly the allocations a real step makes, with
// no memory and no compute.
#pragma once
#include <string_view>
#include <type_traits>

#include "backend/backend.h"
#include "memory/host_allocators.h"

namespace lt {

class MetaBackend final : public Backend {
 public:
  const char* name() const override { return "meta"; }

  // The gemm group's ops also mirror the CUDA backend's cuBLASLt workspace (taken at the first
  // GEMM) when meta simulates CUDA; an op with a result returns a value-initialised one.
#define LT_BACKEND_OP(group, ret, op, params, args)                                          \
  ret op params override {                                                                    \
    if constexpr (std::string_view(#group) == "gemm") simulate_gemm_workspace();              \
    return no_result<ret>();                                                                  \
  }
#include "backend/backend_ops.def"

 private:
  template <class R>
  static R no_result() {
    if constexpr (!std::is_void_v<R>) return R{};
  }
};

}  // namespace lt
