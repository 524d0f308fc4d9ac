// Selective checkpointing (CheckpointOptions::keep_matmul_outputs): the region keeps the results
// of its matmul-class ops and the recomputation takes them back instead of computing them, so
// gradients stay bitwise those of the unchecked region, the region keeps exactly those results,
// its backward allocates no second copy of them, and a recomputation that takes another path
// than the forward is an error rather than wrong gradients.
#include <gtest/gtest.h>

#include "checkpoint_helpers.h"
#include "leantrain/error.h"

using namespace lt;
using namespace ckpt_test;

namespace {

// [16, 32] in, 64 hidden: every tensor is a whole number of 512-byte allocator blocks.
constexpr int64_t kN = 16, kIn = 32, kHid = 64;

struct Net {
  Tensor w1, w2;
  Generator gen{5};
  explicit Net(uint64_t seed) {
    Generator g(seed);
    w1 = randn({kHid, kIn}, g, 0.2f).set_requires_grad(true);
    w2 = randn({kIn, kHid}, g, 0.2f).set_requires_grad(true);
  }
  // linear -> gelu -> dropout -> linear -> layer-norm-free residual add
  Tensor region(const Tensor& x) {
    Tensor h = dropout(gelu(linear(x, w1, Tensor())), 0.25, true, gen);
    return add(x, linear(h, w2, Tensor()));
  }
  CheckpointOptions options(bool keep) {
    return {.params = {w1, w2}, .generators = {&gen}, .keep_matmul_outputs = keep};
  }
};

Tensor input() {
  Generator g(9);
  return randn({kN, kIn}, g).set_requires_grad(true);
}

int64_t bytes(int64_t rows, int64_t cols) { return rows * cols * 4; }

TEST(CheckpointSelective, GradientsEqualTheUncheckedRegion) {
  Net ref(1), ck(1);
  Tensor xr = input(), xc = input();
  sum_all(ref.region(xr)).backward();
  Tensor out = checkpoint([&](const Tensor& x) { return ck.region(x); }, xc, ck.options(true));
  EXPECT_EQ(ck.gen.offset, ref.gen.offset);
  sum_all(out).backward();
  EXPECT_EQ(ck.gen.offset, ref.gen.offset) << "the recomputation puts the generator back";
  EXPECT_EQ(bits(xc.grad()), bits(xr.grad()));
  EXPECT_EQ(bits(ck.w1.grad()), bits(ref.w1.grad()));
  EXPECT_EQ(bits(ck.w2.grad()), bits(ref.w2.grad()));
}

// After the forward the region holds its output and the two linear results, nothing else; the
// unchecked region also holds the GELU input (= linear 1's result) and linear 2's input.
TEST(CheckpointSelective, KeepsTheMatmulResultsAndTheOutput) {
  Allocator& a = allocator_for(Device::cpu());
  Net net(2);
  Tensor x = input();
  const int64_t base = a.stats().allocated_bytes.current;
  Tensor out = checkpoint([&](const Tensor& in) { return net.region(in); }, x, net.options(true));
  EXPECT_EQ(a.stats().allocated_bytes.current - base, bytes(kN, kHid) + 2 * bytes(kN, kIn))
      << "linear 1 and linear 2 results, and the output";
  out = Tensor();
  EXPECT_EQ(a.stats().allocated_bytes.current, base) << "the kept results go with the region's node";
}

// The recomputation allocates what a plain checkpoint's does, less the two linear results.
TEST(CheckpointSelective, RecomputationComputesNoMatmulAgain) {
  Allocator& a = allocator_for(Device::cpu());
  auto backward_allocated = [&](bool keep) {
    Net net(3);
    Tensor x = input();
    Tensor loss = sum_all(checkpoint([&](const Tensor& in) { return net.region(in); }, x, net.options(keep)));
    const int64_t before = a.stats().allocated_bytes.allocated;
    loss.backward();
    return a.stats().allocated_bytes.allocated - before;
  };
  EXPECT_EQ(backward_allocated(false) - backward_allocated(true), bytes(kN, kHid) + bytes(kN, kIn));
}

TEST(CheckpointSelective, RetainGraphReplaysTwice) {
  Net net(4);
  Tensor x = input();
  Tensor loss = sum_all(checkpoint([&](const Tensor& in) { return net.region(in); }, x, net.options(true)));
  loss.backward(Tensor(), true);
  std::vector<float> once = x.grad().to_float_vector();
  loss.backward();
  std::vector<float> twice = x.grad().to_float_vector();
  for (size_t i = 0; i < once.size(); ++i) EXPECT_EQ(twice[i], 2 * once[i]);
}

// A plain checkpoint inside a selective region keeps its own books: the outer replay does not
// see the inner region's calls, and the gradients still match.
TEST(CheckpointSelective, NestedPlainRegion) {
  Net ref(5), ck(5);
  Tensor xr = input(), xc = input();
  sum_all(ref.region(xr)).backward();
  Tensor out = checkpoint(
      [&](const Tensor& x) {
        Tensor h = checkpoint([&](const Tensor& in) { return gelu(linear(in, ck.w1, Tensor())); }, x,
                              {.params = {ck.w1}});
        return add(x, linear(dropout(h, 0.25, true, ck.gen), ck.w2, Tensor()));
      },
      xc, ck.options(true));
  sum_all(out).backward();
  EXPECT_EQ(bits(xc.grad()), bits(xr.grad()));
  EXPECT_EQ(bits(ck.w1.grad()), bits(ref.w1.grad()));
}

TEST(CheckpointSelective, ARecomputationThatDivergesIsAnError) {
  // A region whose forward calls linear once and whose recomputation calls it twice (or never).
  Generator g(7);
  Tensor w = randn({kIn, kIn}, g, 0.2f).set_requires_grad(true);
  auto run = [&](int recompute_calls) -> std::string {
    Tensor x = input();
    int calls = 0;
    Tensor out = checkpoint(
        [&](const Tensor& in) {
          const int n = calls++ == 0 ? 1 : recompute_calls;
          Tensor y = in;
          for (int i = 0; i < n; ++i) y = linear(y, w, Tensor());
          return y;
        },
        x, {.params = {w}, .keep_matmul_outputs = true});
    try {
      sum_all(out).backward();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(run(2).find("the recomputation called linear more often than the forward"), std::string::npos) << run(2);
  EXPECT_NE(run(0).find("the recomputation made 0 matmul-class calls"), std::string::npos) << run(0);
  EXPECT_EQ(run(1), "");
  // Another op in the forward's place: matmul where linear was.
  Tensor x = input();
  int calls = 0;
  Tensor out = checkpoint(
      [&](const Tensor& in) { return calls++ == 0 ? linear(in, w, Tensor()) : matmul(in, w, false, true); }, x,
      {.params = {w}, .keep_matmul_outputs = true});
  try {
    sum_all(out).backward();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("call 1 of the recomputation is matmul"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("was linear"), std::string::npos) << e.what();
  }
}

}  // namespace
