// The block gather of BigBird's block-sparse attention and its adjoint (backend ops
// gather_blocks, scatter_add_blocks): against naive loops, with -1 entries, blocks listed twice,
// strided views (a column slice of a wider tensor) on both sides, u8 and 16-bit dtypes, the
// single rounding of the scatter's sum, adjointness in f64, one-line refusals, and CPU vs CUDA
// bit for bit where a GPU answers.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "error_of.h"
#include "leantrain/cuda_info.h"
#include "leantrain/error.h"
#include "leantrain/ops.h"
#include "leantrain/random.h"

using namespace lt;
using lt::test::error_of;

namespace {

using Table = std::vector<std::vector<int64_t>>;  // [n][L], -1 = a zero block

// n = 3 blocks, L = 4 slots: block 1 twice in row 0, block 0 three times over rows, -1 gaps.
const Table kTable = {{1, 1, -1, 2}, {0, 2, 0, -1}, {-1, -1, 0, 1}};

Tensor table_tensor(const Table& t, Device dev = Device::cpu()) {
  std::vector<int64_t> flat;
  for (const auto& row : t) flat.insert(flat.end(), row.begin(), row.end());
  return from_ints(flat, {int64_t(t.size()), int64_t(t[0].size())}, DType::I32, dev);
}

// The CSR inverse of a table over n blocks: for each block k, the slots i * L + s that name it,
// ascending.
struct Inverse {
  std::vector<int64_t> offsets, entries;
};
Inverse inverse_of(const Table& t, int64_t n) {
  const int64_t R = int64_t(t.size()), L = int64_t(t[0].size());
  Inverse inv{{0}, {}};
  for (int64_t k = 0; k < n; ++k) {
    for (int64_t e = 0; e < R * L; ++e)
      if (t[size_t(e / L)][size_t(e % L)] == k) inv.entries.push_back(e);
    inv.offsets.push_back(int64_t(inv.entries.size()));
  }
  return inv;
}

// Host values of a [B, T, 3W] tensor; the op sees its middle W columns (strides [3TW, 3W, 1]).
struct Wide {
  int64_t B, T, W;
  std::vector<double> v;
  double at(int64_t b, int64_t t, int64_t w) const { return v[size_t((b * T + t) * 3 * W + W + w)]; }
};
Wide make_wide(int64_t B, int64_t T, int64_t W, int mod) {
  Wide x{B, T, W, std::vector<double>(size_t(B * T * 3 * W))};
  for (size_t i = 0; i < x.v.size(); ++i) x.v[i] = double(int64_t(i * 7 + 3) % mod);  // exact in every dtype
  return x;
}
Tensor wide_tensor(const Wide& x, DType dt, Device dev = Device::cpu()) {
  const Shape s{x.B, x.T, 3 * x.W};
  if (is_floating(dt)) return from_vector(x.v, s, dt, dev);
  return from_ints(std::vector<int64_t>(x.v.begin(), x.v.end()), s, dt, dev);
}
Tensor middle(const Tensor& wide, int64_t W) { return slice(wide, 2, W, 2 * W); }

// out[b, i, s, r, w] as the op defines it.
std::vector<double> naive_gather(const Wide& x, const Table& t, int64_t bs) {
  std::vector<double> out;
  for (int64_t b = 0; b < x.B; ++b)
    for (const auto& row : t)
      for (int64_t src : row)
        for (int64_t r = 0; r < bs; ++r)
          for (int64_t w = 0; w < x.W; ++w) out.push_back(src < 0 ? 0.0 : x.at(b, src * bs + r, w));
  return out;
}

Tensor run_gather(const Tensor& x, const Table& t, int64_t bs, double prefill = 77.0) {
  const Device dev = x.device();
  const int64_t n = int64_t(t.size()), L = int64_t(t[0].size());
  // Prefilled, so that the zero blocks must be written; made on the host (CUDA fills no f64).
  Tensor out = to_device(full({x.size(0), n, L, bs, x.size(2)}, prefill, x.dtype()), dev);
  backend_for(dev).gather_blocks(out, x, table_tensor(t, dev), bs);
  return out;
}

void run_scatter(const Tensor& dx, const Tensor& dout, const Table& t, int64_t bs) {
  const Device dev = dx.device();
  const Inverse inv = inverse_of(t, dx.size(1) / bs);
  backend_for(dev).scatter_add_blocks(dx, dout, from_ints(inv.offsets, {int64_t(inv.offsets.size())}, DType::I32, dev),
                                      from_ints(inv.entries, {int64_t(inv.entries.size())}, DType::I32, dev), bs);
}

::testing::AssertionResult same(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "sizes " << got.size() << " vs " << want.size();
  for (size_t i = 0; i < got.size(); ++i)
    if (!(got[i] == want[i]))
      return ::testing::AssertionFailure() << "element " << i << ": " << got[i] << " vs " << want[i];
  return ::testing::AssertionSuccess();
}

// A message that names the op and fits on one line.
void expect_refusal(const std::string& msg, const std::string& op, const std::string& part) {
  EXPECT_NE(msg, "") << op << " accepted the call";
  EXPECT_EQ(msg.rfind(op + ":", 0), 0u) << msg;
  EXPECT_NE(msg.find(part), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

}  // namespace

TEST(BlockOps, GatherF32StridedWithGapsAndDuplicates) {
  const int64_t B = 2, bs = 2, W = 5, T = 3 * bs;
  const Wide x = make_wide(B, T, W, 101);
  const Tensor xt = middle(wide_tensor(x, DType::F32), W);
  ASSERT_FALSE(xt.is_contiguous());
  const Tensor out = run_gather(xt, kTable, bs);
  EXPECT_EQ(out.shape(), Shape({B, 3, 4, bs, W}));
  EXPECT_TRUE(same(out.to_double_vector(), naive_gather(x, kTable, bs)));
}

TEST(BlockOps, GatherU8MaskAndBf16) {
  const int64_t B = 3, bs = 4, W = 3, T = 3 * bs;
  const Wide mask = make_wide(B, T, W, 2);  // 0/1 values
  const Tensor m = run_gather(middle(wide_tensor(mask, DType::U8), W), kTable, bs, 9.0);
  EXPECT_EQ(m.dtype(), DType::U8);
  EXPECT_TRUE(same(m.to_double_vector(), naive_gather(mask, kTable, bs)));

  const Wide x = make_wide(B, T, W, 251);  // integers below 256: exact in bf16
  const Tensor g = run_gather(middle(wide_tensor(x, DType::BF16), W), kTable, bs);
  EXPECT_EQ(g.dtype(), DType::BF16);
  EXPECT_TRUE(same(g.to_double_vector(), naive_gather(x, kTable, bs)));
}

// A contiguous x, a table of one slot, and a block size of the whole sequence.
TEST(BlockOps, GatherContiguousOneBlock) {
  const Tensor x = from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {1, 3, 2});
  EXPECT_TRUE(same(run_gather(x, {{0}}, 3).to_double_vector(), {1, 2, 3, 4, 5, 6}));
  EXPECT_TRUE(same(run_gather(x, {{-1}}, 3).to_double_vector(), {0, 0, 0, 0, 0, 0}));
}

// Into a nonzero strided dx: each block k gets the sum of the dout blocks that gathered it, as
// many times as it was listed; the other columns of the wide tensor stay as they were.
TEST(BlockOps, ScatterAddMatchesNaiveLoopIntoStridedDx) {
  const int64_t B = 2, bs = 3, W = 4, n = 3, L = 4, T = n * bs;
  const Wide base = make_wide(B, T, W, 13);
  const Tensor wide = wide_tensor(base, DType::F32);
  std::vector<double> g(size_t(B * n * L * bs * W));
  for (size_t i = 0; i < g.size(); ++i) g[i] = double(int64_t(i * 5) % 17) - 8.0;
  run_scatter(middle(wide, W), from_vector(g, {B, n, L, bs, W}, DType::F32), kTable, bs);

  std::vector<double> want = base.v;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t s = 0; s < L; ++s) {
        const int64_t k = kTable[size_t(i)][size_t(s)];
        if (k < 0) continue;
        for (int64_t r = 0; r < bs; ++r)
          for (int64_t w = 0; w < W; ++w)
            want[size_t((b * T + k * bs + r) * 3 * W + W + w)] += g[size_t((((b * n + i) * L + s) * bs + r) * W + w)];
      }
  EXPECT_NE(want, base.v);
  EXPECT_TRUE(same(wide.to_double_vector(), want));
}

// The listed blocks are summed in f32 and added to dx once: 256 + (1 + 1) = 258 in bf16, where
// adding each 1 on its own would round back to 256 twice.
TEST(BlockOps, ScatterAddRoundsOnceInBf16) {
  const Table t = {{0, 0}};
  const Tensor dx = full({1, 1, 1}, 256.0, DType::BF16);
  run_scatter(dx, full({1, 1, 2, 1, 1}, 1.0, DType::BF16), t, 1);
  EXPECT_EQ(dx.item(), 258.0);
}

// <gather(x), y> == <x, scatter(y)> in f64, with strided x and dx.
TEST(BlockOps, GatherAndScatterAreAdjointInF64) {
  const int64_t B = 2, bs = 3, W = 4, n = 3, L = 4, T = n * bs;
  Generator gen(7);
  const Tensor x = middle(randn({B, T, 3 * W}, gen, 1.0f, DType::F64), W);
  const Tensor y = randn({B, n, L, bs, W}, gen, 1.0f, DType::F64);
  const Tensor dx = middle(zeros({B, T, 3 * W}, DType::F64), W);
  const std::vector<double> gx = run_gather(x, kTable, bs).to_double_vector(), yv = y.to_double_vector();
  run_scatter(dx, y, kTable, bs);
  const std::vector<double> xv = x.to_double_vector(), sy = dx.to_double_vector();
  double lhs = 0, rhs = 0, scale = 0;
  for (size_t i = 0; i < gx.size(); ++i) lhs += gx[i] * yv[i], scale += std::fabs(gx[i] * yv[i]);
  for (size_t i = 0; i < xv.size(); ++i) rhs += xv[i] * sy[i];
  EXPECT_GT(scale, 1.0);
  EXPECT_NEAR(lhs, rhs, 1e-12 * scale);
}

TEST(BlockOps, RefusalsAreOneLine) {
  Backend& cpu = backend_for(Device::cpu());
  const int64_t bs = 2, W = 3;
  const Tensor x = zeros({1, 6, W});
  const Tensor out = zeros({1, 3, 4, bs, W});
  const Tensor table = table_tensor(kTable);
  auto gather = [&](const Tensor& o, const Tensor& xx, const Tensor& t, int64_t b) {
    return error_of([&] { cpu.gather_blocks(o, xx, t, b); });
  };
  EXPECT_EQ(gather(out, x, table, bs), "");
  expect_refusal(gather(out, x, table_tensor({{0, 1, 2, 3}, {0, 0, 0, 0}, {0, 0, 0, 0}}), bs), "gather_blocks",
                 "table entry 3 is 3");
  expect_refusal(gather(out, x, table_tensor({{0, 1, 2, 0}, {0, -2, 0, 0}, {0, 0, 0, 0}}), bs), "gather_blocks",
                 "is -2");
  expect_refusal(gather(out, zeros({1, 7, W}), table, bs), "gather_blocks", "block size 2");
  expect_refusal(gather(out, x, table, 0), "gather_blocks", "block size 0");
  expect_refusal(gather(zeros({1, 3, 4, bs, W + 1}), x, table, bs), "gather_blocks", "out is f32 [1, 3, 4, 2, 4]");
  expect_refusal(gather(zeros({1, 3, 4, bs, W}, DType::BF16), x, table, bs), "gather_blocks", "out is bf16");
  expect_refusal(gather(out, x, from_ints(std::vector<int64_t>(12, 0), {3, 4}, DType::I64), bs), "gather_blocks",
                 "table must be a contiguous i32");
  expect_refusal(gather(out, transpose(zeros({1, W, 6}), 1, 2), table, bs), "gather_blocks", "stride 6 on W");

  const Inverse inv = inverse_of(kTable, 3);
  const Tensor off = from_ints(inv.offsets, {4}, DType::I32);
  const Tensor ent = from_ints(inv.entries, {int64_t(inv.entries.size())}, DType::I32);
  auto scatter = [&](const Tensor& dx, const Tensor& dout, const Tensor& o, const Tensor& e, int64_t b) {
    return error_of([&] { cpu.scatter_add_blocks(dx, dout, o, e, b); });
  };
  EXPECT_EQ(scatter(x, out, off, ent, bs), "");
  expect_refusal(scatter(zeros({1, 6, W}, DType::U8), zeros({1, 3, 4, bs, W}, DType::U8), off, ent, bs),
                 "scatter_add_blocks", "dtype u8");
  expect_refusal(scatter(x, zeros({1, 3, 4, bs, W}, DType::F64), off, ent, bs), "scatter_add_blocks", "dout is f64");
  expect_refusal(scatter(zeros({1, 5, W}), out, off, ent, bs), "scatter_add_blocks", "block size 2");
  expect_refusal(scatter(x, out, from_ints({0, 1, 2}, {3}, DType::I32), ent, bs), "scatter_add_blocks",
                 "3 entries for 3 blocks");
  std::vector<int64_t> bad = inv.entries;
  bad.back() = 12;  // slots are 0..11
  expect_refusal(scatter(x, out, off, from_ints(bad, {int64_t(bad.size())}, DType::I32), bs), "scatter_add_blocks",
                 "inverse entry");
  expect_refusal(scatter(x, out, from_ints({0, 1, 2, 3}, {4}, DType::I32), ent, bs), "scatter_add_blocks",
                 "inv_offsets do not rise");
}

// A table of fewer rows than x has blocks (BigBird's global rows: R = 1 over n = 3 blocks),
// and its adjoint: dout [B, 1, L, bs, W].
TEST(BlockOps, TableRowsNeedNotMatchTheBlockCount) {
  const int64_t B = 2, bs = 2, W = 3, T = 3 * bs;
  const Table t = {{2, -1, 0, 2}};
  const Wide x = make_wide(B, T, W, 31);
  const Tensor out = run_gather(middle(wide_tensor(x, DType::F32), W), t, bs);
  EXPECT_EQ(out.shape(), Shape({B, 1, 4, bs, W}));
  EXPECT_TRUE(same(out.to_double_vector(), naive_gather(x, t, bs)));

  std::vector<double> g(size_t(B * 4 * bs * W));
  for (size_t i = 0; i < g.size(); ++i) g[i] = double(i);
  const Tensor dx = zeros({B, T, W});
  run_scatter(dx, from_vector(g, {B, 1, 4, bs, W}, DType::F32), t, bs);
  std::vector<double> want(size_t(B * T * W), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < 4; ++s)
      if (const int64_t k = t[0][size_t(s)]; k >= 0)
        for (int64_t j = 0; j < bs * W; ++j)
          want[size_t((b * T + k * bs) * W + j)] += g[size_t((b * 4 + s) * bs * W + j)];
  EXPECT_TRUE(same(dx.to_double_vector(), want));
}

// The CUDA kernels against the CPU, bit for bit: 16-byte and per-element paths (W * size a
// multiple of 16 or not, aligned or odd column offsets), unit sizes 1, 2, 4, 8 and 16 bytes, scatter in
// f32, bf16 and f16 into strided dx.
TEST(BlockOps, CudaMatchesCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  const Device gpu = Device::cuda(0);
  const int64_t B = 2, n = 3, L = 4;
  for (int64_t bs : {1, 4})
    for (int64_t W : {8, 16, 5})
      for (DType dt : {DType::F32, DType::BF16, DType::F16, DType::U8, DType::I64}) {  // no f64 on CUDA
        const std::string what = std::string(dtype_name(dt)) + " bs " + std::to_string(bs) + " W " + std::to_string(W);
        const Wide x = make_wide(B, n * bs, W, dt == DType::U8 ? 255 : 1000);
        const Tensor host_x = wide_tensor(x, dt);
        const Tensor want = run_gather(middle(host_x, W), kTable, bs);
        EXPECT_TRUE(same(run_gather(middle(to_device(host_x, gpu), W), kTable, bs).to_double_vector(),
                         want.to_double_vector()))
            << what;
        // A column offset of 1: rows no longer 16-byte aligned.
        const Tensor odd = slice(host_x, 2, 1, 1 + W);
        EXPECT_TRUE(same(run_gather(slice(to_device(host_x, gpu), 2, 1, 1 + W), kTable, bs).to_double_vector(),
                         run_gather(odd, kTable, bs).to_double_vector()))
            << what << " offset 1";
        if (dt != DType::F32 && dt != DType::BF16 && dt != DType::F16) continue;
        Generator gen(uint64_t(bs * 100 + W));
        const Tensor g = randn({B, n, L, bs, W}, gen, 1.0f, dt);
        const Tensor dx_cpu = wide_tensor(x, dt), dx_gpu = to_device(dx_cpu, gpu);
        run_scatter(middle(dx_cpu, W), g, kTable, bs);
        run_scatter(middle(dx_gpu, W), to_device(g, gpu), kTable, bs);
        EXPECT_TRUE(same(dx_gpu.to_double_vector(), dx_cpu.to_double_vector())) << what << " scatter";
      }
}
