// linear_gelu is gelu(linear(...), Tanh) in one op: on the CPU (the gemm, then the unary op) its
// values and gradients are those of the two ops bit for bit, with the same allocations in the
// same order and the same autograd nodes; GPT-2's MLP takes it unless a module is wrapped.
#include <gtest/gtest.h>

#include "leantrain/autograd.h"
#include "leantrain/memory.h"
#include "leantrain/models.h"
#include "leantrain/ops.h"
#include "small_models.h"

using namespace lt;

namespace {

struct Result {
  std::vector<float> y, dx, dw, db;
  std::vector<int64_t> allocs;  // requested bytes of each allocation, forward then backward
};

Result run_op(bool fused, bool in_out, DType dt) {
  Generator gen(5);
  Tensor x = randn({3, 7, 16}, gen, 1.0f, dt), w = randn(in_out ? Shape{16, 40} : Shape{40, 16}, gen, 1.0f, dt);
  Tensor b = randn({40}, gen, 1.0f, dt), g = randn({3, 7, 40}, gen, 1.0f, dt);
  for (Tensor* t : {&x, &w, &b}) t->set_requires_grad(true);
  Allocator& a = allocator_for(Device::cpu());
  a.clear_history();
  a.set_history(true);
  Tensor y = fused ? linear_gelu(x, w, b, in_out) : gelu(linear(x, w, b, in_out), GeluApprox::Tanh);
  y.backward(g);
  a.set_history(false);
  Result r;
  for (const MemoryEvent& e : a.history())
    if (e.action == MemoryEvent::Action::Alloc) r.allocs.push_back(e.requested);
  a.clear_history();
  r.y = y.to_float_vector();
  r.dx = x.grad().to_float_vector();
  r.dw = w.grad().to_float_vector();
  r.db = b.grad().to_float_vector();
  return r;
}

}  // namespace

TEST(LinearGelu, EqualsLinearThenGeluOnTheCpu) {
  for (DType dt : {DType::F32, DType::BF16})
    for (bool in_out : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + (in_out ? " [in, out]" : " [out, in]"));
      const Result f = run_op(true, in_out, dt), u = run_op(false, in_out, dt);
      EXPECT_EQ(f.y, u.y);
      EXPECT_EQ(f.dx, u.dx);
      EXPECT_EQ(f.dw, u.dw);
      EXPECT_EQ(f.db, u.db);
      EXPECT_EQ(f.allocs, u.allocs);
    }
}

TEST(LinearGelu, RecordsTheTwoNodesOfLinearThenGelu) {
  Generator gen(6);
  Tensor x = randn({4, 8}, gen), w = randn({16, 8}, gen);
  w.set_requires_grad(true);
  Tensor y = linear_gelu(x, w, Tensor());
  ASSERT_TRUE(y.grad_fn());
  EXPECT_EQ(std::string(y.grad_fn()->name), "gelu_tanh");
  ASSERT_EQ(y.grad_fn()->next.size(), 1u);
  ASSERT_TRUE(y.grad_fn()->next[0]);
  EXPECT_EQ(std::string(y.grad_fn()->next[0]->name), "linear");
}

// GPT-2's MLP takes the fused op: the model's loss and gradients equal those with the MLP's GELU
// wrapped (a forward wrapper on act turns the fusion off), bit for bit on the CPU.
TEST(LinearGelu, Gpt2MlpFusesUnlessWrapped) {
  auto grads = [](bool wrap_act) {
    models::GPT2 m(test::small_gpt2(), {.seed = 3});
    int wrapped = 0;
    if (wrap_act)
      for (auto& [path, mod] : m.named_modules())
        if (path.size() > 4 && path.compare(path.size() - 4, 4, ".act") == 0) {
          mod->set_forward_wrapper([&wrapped](nn::Module&, const Tensor& x, const nn::Module::ForwardFn& f) {
            ++wrapped;
            return f(x);
          });
        }
    Tensor ids = from_ints({1, 5, 9, 2, 7, 3, 8, 4}, {2, 4});
    Tensor tg = from_ints({5, 9, 2, 7, 3, 8, 4, 1}, {2, 4});
    m.loss(ids, tg).backward();
    std::vector<float> out;
    for (auto& [name, p] : m.named_parameters()) {
      const std::vector<float> g = p.grad().to_float_vector();
      out.insert(out.end(), g.begin(), g.end());
    }
    if (wrap_act) EXPECT_EQ(wrapped, 2);  // both blocks went through the wrapper
    return out;
  };
  EXPECT_EQ(grads(false), grads(true));
}
