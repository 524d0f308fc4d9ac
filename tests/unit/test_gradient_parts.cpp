// By default (LEANTRAIN_GRADIENT_PARTS=1) a stacked weight's gradient (stacked_rows: q | k | v or gate | up
// as one GEMM) becomes its weights' .grad in place: each weight's row block of the one gradient
// buffer, not a copy (autograd/gradient_parts.h). The values are those of separate weights, a
// second backward adds into the blocks, a gradient someone else still holds is copied as before,
// and with the knob at 0 every weight gets a copy.
#include <gtest/gtest.h>

#include <vector>

#include "leantrain/autograd.h"
#include "leantrain/nn_llama.h"
#include "leantrain/ops.h"
#include "unit/knob_env.h"

using namespace lt;

namespace {

struct Stack {
  Tensor flat;
  std::vector<Tensor> ws;  // leaves viewing flat back to back
};

// Three weights of 5, 2 and 2 rows of 7 in one buffer, as the parameter store lays them out.
Stack back_to_back(uint64_t seed) {
  Generator gen(seed);
  Stack s;
  s.flat = randn({9 * 7}, gen, 1.0f, DType::F64);
  int64_t off = 0;
  for (int64_t rows : {5, 2, 2}) {
    Tensor w = make_view(s.flat, {rows, 7}, {7, 1}, off);
    w.set_requires_grad(true);
    s.ws.push_back(w);
    off += rows * 7;
  }
  return s;
}

std::vector<std::vector<double>> grads_of(const std::vector<Tensor>& ws) {
  std::vector<std::vector<double>> g;
  for (const Tensor& w : ws) g.push_back(w.grad().to_double_vector());
  return g;
}

TEST(GradientParts, StackedWeightsTakeTheirBlocksInPlaceWithTheSeparateWeightsValues) {
  test::KnobEnv on("LEANTRAIN_GRADIENT_PARTS", "1");
  Stack s = back_to_back(3);
  Generator gen(4);
  const Tensor x = randn({6, 7}, gen, 1.0f, DType::F64), r = randn({6, 9}, gen, 1.0f, DType::F64);
  // Separate weights (own buffers): the stack is a concatenation, each gradient a copy.
  std::vector<Tensor> sep;
  for (const Tensor& w : s.ws) sep.push_back(w.detach().clone().set_requires_grad(true));
  sum_all(mul(linear(x, nn::stacked_rows(sep), Tensor()), r)).backward();
  sum_all(mul(linear(x, nn::stacked_rows(s.ws), Tensor()), r)).backward();
  EXPECT_EQ(grads_of(s.ws), grads_of(sep));
  // In place: one buffer, each block where its weight's rows are.
  EXPECT_EQ(s.ws[0].grad().storage(), s.ws[1].grad().storage());
  EXPECT_EQ(s.ws[1].grad().storage(), s.ws[2].grad().storage());
  EXPECT_EQ(s.ws[1].grad().offset() - s.ws[0].grad().offset(), 5 * 7);
  EXPECT_NE(sep[0].grad().storage(), sep[1].grad().storage());

  // A second backward adds into the blocks (micro-batches).
  sum_all(mul(linear(x, nn::stacked_rows(sep), Tensor()), r)).backward();
  sum_all(mul(linear(x, nn::stacked_rows(s.ws), Tensor()), r)).backward();
  EXPECT_EQ(grads_of(s.ws), grads_of(sep));
}

TEST(GradientParts, AGradientSomeoneElseHoldsIsCopied) {
  test::KnobEnv on("LEANTRAIN_GRADIENT_PARTS", "1");
  Stack s = back_to_back(5);
  Generator gen(6);
  const Tensor x = randn({4, 7}, gen, 1.0f, DType::F64);
  Tensor stacked = nn::stacked_rows(s.ws);
  Tensor held;  // a pre-hook keeps the stack's gradient: the weights must not alias it
  ASSERT_TRUE(stacked.grad_fn());
  stacked.grad_fn()->register_pre_hook([&](Node&, Tensor& g) { held = g; });
  sum_all(linear(x, stacked, Tensor())).backward();
  ASSERT_TRUE(held.defined());
  EXPECT_NE(s.ws[0].grad().storage(), held.storage());
  EXPECT_NE(s.ws[0].grad().storage(), s.ws[1].grad().storage());
}

TEST(GradientParts, OnByDefaultAndOffWithTheKnobAtZero) {
  auto first_two_share_a_buffer = [] {  // after one backward through the stack
    Stack s = back_to_back(7);
    Generator gen(8);
    sum_all(linear(randn({3, 7}, gen, 1.0f, DType::F64), nn::stacked_rows(s.ws), Tensor())).backward();
    return s.ws[0].grad().storage() == s.ws[1].grad().storage();
  };
  EXPECT_TRUE(first_two_share_a_buffer());
  test::KnobEnv off("LEANTRAIN_GRADIENT_PARTS", "0");
  EXPECT_FALSE(first_two_share_a_buffer());
}

}  // namespace
