// The op list (backend_ops.def) against the backends: cpu, cuda and meta override every op,
// meta runs every op as a no-op, and an op a backend lacks fails with one line naming backend
// and op.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/meta/meta_backend.h"
#include "leantrain/error.h"

using namespace lt;

namespace {

// The class that declares a member function: &B::f names B when B overrides f, else the base.
template <class M>
struct owner_of;
template <class F, class C>
struct owner_of<F C::*> {
  using type = C;
};

// The ops of the list that B does not declare itself (inherits Backend's throwing default).
template <class B>
std::vector<std::string> ops_not_overridden() {
  std::vector<std::string> lacking;
#define LT_BACKEND_OP(group, ret, op, params, args) \
  if (!std::is_same_v<typename owner_of<decltype(&B::op)>::type, B>) lacking.push_back(#op);
#include "backend/backend_ops.def"
  return lacking;
}

std::vector<std::string> all_op_names() {
  std::vector<std::string> names;
  for (const BackendOpInfo& info : kBackendOps) names.push_back(info.name);
  return names;
}

// Calls b.*f with value-initialised arguments (undefined tensors, zeros, empty spans): enough
// for ops that do nothing or throw before looking at them.
template <class R, class... A>
void call_with_defaults(Backend& b, R (Backend::*f)(A...)) {
  (b.*f)(std::remove_cvref_t<A>{}...);
}

void call_op(Backend& b, BackendOp which) {
  switch (which) {
#define LT_BACKEND_OP(group, ret, op, params, args) \
  case BackendOp::op: return call_with_defaults(b, &Backend::op);
#include "backend/backend_ops.def"
  }
  FAIL() << "op " << int(which) << " is not in backend_ops.def";
}

// Overrides nothing: every op is missing.
class BareBackend final : public Backend {
 public:
  const char* name() const override { return "bare"; }
};

// Has every op (as meta's no-op) except `lacking`, which goes to Backend's default: what a
// backend that does not override that one op gets.
class LackingOneBackend final : public Backend {
 public:
  explicit LackingOneBackend(BackendOp lacking) : lacking_(lacking) {}
  const char* name() const override { return "lacking-one"; }
#define LT_BACKEND_OP(group, ret, op, params, args) \
  ret op params override { return lacking_ == BackendOp::op ? Backend::op args : meta_.op args; }
#include "backend/backend_ops.def"

 private:
  BackendOp lacking_;
  MetaBackend meta_;
};

std::string missing_message(const std::string& backend, const std::string& op) {
  return "backend '" + backend + "' has no op '" + op + "': the " + backend +
         " backend does not implement it (use --device cpu, whose backend has every op, or implement " + op +
         " in the " + backend + " backend)";
}

}  // namespace

TEST(BackendOps, TableHasOneUniqueNamedEntryPerOp) {
  std::set<std::string> names, groups;
  for (const BackendOpInfo& info : kBackendOps) {
    EXPECT_TRUE(names.insert(info.name).second) << "op listed twice: " << info.name;
    groups.insert(info.group);
  }
  EXPECT_GE(names.size(), 35u);  // the pure virtual ops of the day the list was made
  EXPECT_EQ(std::string(kBackendOps[size_t(BackendOp::gemm)].name), "gemm");
  EXPECT_EQ(std::string(kBackendOps[size_t(BackendOp::lion8bit_step)].group), "optim");
  EXPECT_EQ(groups, (std::set<std::string>{"data", "elementwise", "reduce", "gemm", "norm", "attention",
                                           "embedding", "loss", "optim", "quant", "conv", "delta"}));
}

TEST(BackendOps, CpuCudaAndMetaOverrideEveryOp) {
  EXPECT_EQ(ops_not_overridden<CpuBackend>(), std::vector<std::string>{});
  EXPECT_EQ(ops_not_overridden<CudaBackend>(), std::vector<std::string>{});
  EXPECT_EQ(ops_not_overridden<MetaBackend>(), std::vector<std::string>{});
  // The check sees a missing override: a backend that overrides nothing lacks every op.
  EXPECT_EQ(ops_not_overridden<BareBackend>(), all_op_names());
}

TEST(BackendOps, BackendsNameThemselves) {
  EXPECT_STREQ(backend_for(Device::cpu()).name(), "cpu");
  EXPECT_STREQ(backend_for(Device::meta()).name(), "meta");
}

TEST(BackendOps, MetaRunsEveryOpAsANoOp) {
  Backend& meta = backend_for(Device::meta());
  for (size_t i = 0; i < std::size(kBackendOps); ++i)
    EXPECT_NO_THROW(call_op(meta, BackendOp(i))) << kBackendOps[i].name;
}

TEST(BackendOps, MissingOpFailsWithOneLineNamingBackendAndOp) {
  BareBackend bare;
  Backend& b = bare;
  try {
    b.rope(Tensor(), Tensor(), {}, 0, Tensor(), 1, false);
    FAIL() << "rope on a backend without it did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.what_part(), "backend 'bare' has no op 'rope'");
    EXPECT_EQ(std::string(e.what()), missing_message("bare", "rope"));
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
  }
}

TEST(BackendOps, EachOpMissingAloneFailsAndNamesItself) {
  for (size_t lacking = 0; lacking < std::size(kBackendOps); ++lacking) {
    LackingOneBackend backend{BackendOp(lacking)};
    for (size_t i = 0; i < std::size(kBackendOps); ++i) {
      if (i != lacking) {
        EXPECT_NO_THROW(call_op(backend, BackendOp(i))) << kBackendOps[i].name;
        continue;
      }
      try {
        call_op(backend, BackendOp(i));
        ADD_FAILURE() << kBackendOps[i].name << " did not throw though the backend lacks it";
      } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()), missing_message("lacking-one", kBackendOps[i].name));
      }
    }
  }
}
