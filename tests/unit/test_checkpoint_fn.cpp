// lt::checkpoint on plain functions: gradients equal to the unchecked computation, nothing of
// the region saved, captured masks, frozen inputs, identity regions, generators, nesting,
// retain_graph, and no node outside grad mode.
#include <gtest/gtest.h>

#include "checkpoint_helpers.h"
#include "leantrain/error.h"

using namespace lt;
using namespace ckpt_test;

namespace {

struct Net {
  Tensor w1, w2;
  Generator gen{5};
  explicit Net(uint64_t seed) {
    Generator g(seed);
    w1 = randn({8, 8}, g, 0.3f).set_requires_grad(true);
    w2 = randn({8, 8}, g, 0.3f).set_requires_grad(true);
  }
  // linear -> gelu -> dropout -> linear, masked by a 0/1 row mask.
  Tensor region(const Tensor& x, const Tensor& mask) {
    Tensor h = dropout(gelu(linear(x, w1, Tensor())), 0.3, true, gen);
    return mul(linear(h, w2, Tensor()), mask);
  }
};

Tensor input(bool grad) {
  Generator g(9);
  Tensor x = randn({4, 8}, g);
  return grad ? x.set_requires_grad(true) : x;
}

Tensor row_mask() { return from_vector(std::vector<float>{1, 0, 1, 1}, {4, 1}); }

TEST(CheckpointFn, GradientsEqualTheUncheckedRegion) {
  Net ref(1), ck(1);
  Tensor xr = input(true), xc = input(true), mask = row_mask();
  sum_all(ref.region(xr, mask)).backward();
  CheckpointOptions o{.params = {ck.w1, ck.w2}, .generators = {&ck.gen}, .captured = {mask}};
  Tensor out = checkpoint([&](const Tensor& x) { return ck.region(x, mask); }, xc, o);
  EXPECT_STREQ(out.grad_fn()->name, "checkpoint");
  EXPECT_EQ(ck.gen.offset, ref.gen.offset) << "the forward drew as many numbers";
  sum_all(out).backward();
  EXPECT_EQ(ck.gen.offset, ref.gen.offset) << "the recomputation puts the generator back";
  EXPECT_EQ(bits(xc.grad()), bits(xr.grad()));
  EXPECT_EQ(bits(ck.w1.grad()), bits(ref.w1.grad()));
  EXPECT_EQ(bits(ck.w2.grad()), bits(ref.w2.grad()));
  EXPECT_TRUE(xc.is_leaf());
}

// The region's intermediates are not kept: after the forward only the output (and the input)
// are alive; the unchecked region also keeps the GELU input and the second linear's input.
TEST(CheckpointFn, KeepsOnlyInputAndOutput) {
  Allocator& a = allocator_for(Device::cpu());
  Net net(2);
  Tensor x = input(true), mask = row_mask();
  const int64_t base = a.stats().allocated_bytes.current;
  Tensor plain = net.region(x, mask);
  const int64_t kept_plain = a.stats().allocated_bytes.current - base;
  plain = Tensor();
  const int64_t base2 = a.stats().allocated_bytes.current;
  Tensor out = checkpoint([&](const Tensor& in) { return net.region(in, mask); }, x,
                          {.params = {net.w1, net.w2}, .generators = {&net.gen}});
  EXPECT_EQ(a.stats().allocated_bytes.current - base2, 512) << "only the [4, 8] output";
  EXPECT_EQ(kept_plain, 3 * 512) << "linear 1 out (GELU input), dropout out (linear 2 input), output";
}

TEST(CheckpointFn, FrozenInputStillGivesParameterGradients) {
  Net ref(3), ck(3);
  Tensor x = input(false), mask = row_mask();
  sum_all(ref.region(x, mask)).backward();
  Tensor out = checkpoint([&](const Tensor& in) { return ck.region(in, mask); }, x,
                          {.params = {ck.w1, ck.w2}, .generators = {&ck.gen}});
  ASSERT_TRUE(out.requires_grad()) << "recorded through the parameters";
  sum_all(out).backward();
  EXPECT_EQ(bits(ck.w1.grad()), bits(ref.w1.grad()));
  EXPECT_FALSE(x.grad().defined());
}

TEST(CheckpointFn, NothingRecordedWithoutGrad) {
  Net net(4);
  Tensor x = input(true);
  {
    NoGradGuard ng;
    EXPECT_FALSE(checkpoint([&](const Tensor& in) { return net.region(in, row_mask()); }, x).requires_grad());
  }
  Tensor frozen = input(false);
  EXPECT_FALSE(checkpoint([](const Tensor& in) { return gelu(in); }, frozen).requires_grad());
}

// An identity region returns its input: the input must stay a leaf, its gradient arrive.
TEST(CheckpointFn, IdentityRegion) {
  Tensor x = input(true);
  Tensor y = checkpoint([](const Tensor& in) { return in; }, x);
  EXPECT_TRUE(x.is_leaf());
  sum_all(scale(y, 2.0)).backward();
  for (float g : x.grad().to_float_vector()) EXPECT_EQ(g, 2.0f);
}

TEST(CheckpointFn, SeveralInputsAndNesting) {
  Generator g(6);
  Tensor a = randn({3, 5}, g).set_requires_grad(true), b = randn({3, 5}, g).set_requires_grad(true);
  Tensor a2 = a.detach().set_requires_grad(true), b2 = b.detach().set_requires_grad(true);
  auto f = [](const Tensor& p, const Tensor& q) { return mul(tanh(p), sigmoid(add(p, q))); };
  sum_all(f(a, b)).backward();
  Tensor out = checkpoint(
      [&](const std::vector<Tensor>& in) {
        Tensor t = checkpoint([](const Tensor& p) { return tanh(p); }, in[0]);  // nested region
        return mul(t, sigmoid(add(in[0], in[1])));
      },
      {a2, b2});
  sum_all(out).backward();
  EXPECT_EQ(bits(a2.grad()), bits(a.grad()));
  EXPECT_EQ(bits(b2.grad()), bits(b.grad()));
}

TEST(CheckpointFn, RetainGraphAllowsASecondBackward) {
  Tensor x = input(true);
  Tensor loss = sum_all(checkpoint([](const Tensor& in) { return mul(in, in); }, x));
  loss.backward(Tensor(), true);
  std::vector<float> once = x.grad().to_float_vector();
  loss.backward();
  std::vector<float> twice = x.grad().to_float_vector();
  for (size_t i = 0; i < once.size(); ++i) EXPECT_EQ(twice[i], 2 * once[i]);
  EXPECT_THROW(loss.backward(), Error) << "the graph was freed by the second backward";
}

TEST(CheckpointFn, CapturedTensorMustNotRequireGrad) {
  Tensor x = input(true), m = input(true);
  try {
    checkpoint([&](const Tensor& in) { return mul(in, m); }, x, {.captured = {m}});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("captured tensor requires grad"), std::string::npos) << e.what();
  }
}

}  // namespace

// Routed (RouteParamGradsScope, what a breadth-first step records under): the region's node hands
// its parameters' gradients to the outer backward, which sums them over both uses (two
// micro-batches) before the parameter's AccumulateGrad runs once; the bits are those of two
// ordinary checkpointed backwards one after the other.
TEST(CheckpointFn, RoutedRegionHandsParameterGradientsToTheOuterBackward) {
  Net ref(4), ck(4);
  Tensor mask = row_mask();
  const Tensor xs[2] = {input(false), scale(input(false), -0.5)};
  CheckpointOptions oref{.params = {ref.w1, ref.w2}, .generators = {&ref.gen}, .captured = {mask}};
  for (const Tensor& x : xs) sum_all(checkpoint([&](const Tensor& in) { return ref.region(in, mask); }, x, oref)).backward();
  int accumulations = 0;
  ck.w1.register_post_accumulate_grad_hook([&](Tensor&) { ++accumulations; });
  CheckpointOptions o{.params = {ck.w1, ck.w2}, .generators = {&ck.gen}, .captured = {mask}};
  std::vector<Tensor> roots;
  {
    RouteParamGradsScope routed;
    for (const Tensor& x : xs) roots.push_back(sum_all(checkpoint([&](const Tensor& in) { return ck.region(in, mask); }, x, o)));
  }
  run_backward(roots);
  EXPECT_EQ(accumulations, 1);
  EXPECT_EQ(bits(ck.w1.grad()), bits(ref.w1.grad()));
  EXPECT_EQ(bits(ck.w2.grad()), bits(ref.w2.grad()));
  EXPECT_EQ(ck.gen.offset, ref.gen.offset);
}

// A routed region that reads a parameter it does not declare would let that parameter be
// updated from one micro-batch's gradient: refused with an error instead.
TEST(CheckpointFn, RoutedRegionRefusesAParameterNotItsOwn) {
  Net ck(5);
  Tensor mask = row_mask();
  Tensor out;
  {
    RouteParamGradsScope routed;
    out = checkpoint([&](const Tensor& in) { return ck.region(in, mask); }, input(false),
                     {.params = {ck.w1}, .generators = {&ck.gen}, .captured = {mask}});
  }
  try {
    sum_all(out).backward();
    FAIL() << "a foreign parameter was accumulated";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a checkpointed region read a parameter that is not among its own"),
              std::string::npos)
        << e.what();
  }
}
