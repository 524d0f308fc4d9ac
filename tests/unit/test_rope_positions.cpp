// Rotary embedding with per-token positions (i32 [B, T], e.g. AttentionMask::doc_pos of packed
// documents) against the existing rotary with offsets: each document of a packed row, rotated
// with positions restarting at 0, equals the same tokens rotated alone from offset 0, bit for
// bit, forward and backward, in rotary_embedding ([B, H, T, D]) and rotary_embedding_packed
// ([B, T, N*D]). On CUDA (skipped without a GPU) against the CPU. Plus one-line errors.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "leantrain/cuda_info.h"
#include "leantrain/ops.h"
#include "unit/error_of.h"
#include "unit/rel_error.h"

using namespace lt;

namespace {

using Vals = std::vector<double>;

// Rows of documents: row b holds lens[b] documents one after another.
const std::vector<std::vector<int64_t>> kDocs = {{3, 1, 6, 1}, {11}};
constexpr int64_t kB = 2, kT = 11, kH = 3, kD = 8, kN = 4, kRot = 3;

std::vector<int64_t> positions_of(const std::vector<std::vector<int64_t>>& docs, int64_t shift) {
  std::vector<int64_t> p;
  for (const auto& row : docs)
    for (int64_t len : row)
      for (int64_t i = 0; i < len; ++i) p.push_back(i + shift);
  return p;
}

struct Result {
  Vals y, dx;
};

// The op under test on x (values xv) with positions, and its gradient for upstream gv.
Result run(bool packed, const Vals& xv, const Vals& gv, const Shape& shape, const Tensor& pos, DType dt, Device dev) {
  Tensor x = from_vector(xv, shape, dt, dev).set_requires_grad(true);
  const std::vector<float> inv = rope_inv_freq(kD, 10000.0);
  Tensor y = packed ? rotary_embedding_packed(x, inv, kRot, pos) : rotary_embedding(x, 10000.0, pos);
  y.backward(from_vector(gv, shape, dt, dev));
  return {y.to_double_vector(), x.grad().to_double_vector()};
}
Result run_offset(bool packed, const Vals& xv, const Vals& gv, const Shape& shape, int64_t offset) {
  Tensor x = from_vector(xv, shape, DType::F64).set_requires_grad(true);
  const std::vector<float> inv = rope_inv_freq(kD, 10000.0);
  Tensor y = packed ? rotary_embedding_packed(x, inv, kRot, offset) : rotary_embedding(x, 10000.0, offset);
  y.backward(from_vector(gv, shape, DType::F64));
  return {y.to_double_vector(), x.grad().to_double_vector()};
}

// Token t of row b in a [B, H, T, D] (packed: [B, T, N*D]) tensor: the flat indices of its values.
std::vector<size_t> token_values(bool packed, int64_t b, int64_t t) {
  std::vector<size_t> idx;
  if (packed) {
    for (int64_t i = 0; i < kN * kD; ++i) idx.push_back(size_t((b * kT + t) * kN * kD + i));
  } else {
    for (int64_t h = 0; h < kH; ++h)
      for (int64_t d = 0; d < kD; ++d) idx.push_back(size_t(((b * kH + h) * kT + t) * kD + d));
  }
  return idx;
}

TEST(RopePositions, EachDocumentEqualsItsOwnRunFromOffsetZero) {
  Generator gen(3);
  for (bool packed : {false, true}) {
    SCOPED_TRACE(packed ? "packed" : "[B, H, T, D]");
    const Shape shape = packed ? Shape{kB, kT, kN * kD} : Shape{kB, kH, kT, kD};
    const Vals xv = randn(shape, gen, 1.0f, DType::F64).to_double_vector();
    const Vals gv = randn(shape, gen, 1.0f, DType::F64).to_double_vector();
    const Tensor pos = from_ints(positions_of(kDocs, 0), {kB, kT}, DType::I32);
    const Result got = run(packed, xv, gv, shape, pos, DType::F64, Device::cpu());
    // The reference: every position p of the packed batch rotated by offset p, through a one-token
    // call of the existing op (same f32 angle inv_freq * p, so the same bits).
    const std::vector<int64_t> p = positions_of(kDocs, 0);
    for (int64_t b = 0; b < kB; ++b)
      for (int64_t t = 0; t < kT; ++t) {
        const std::vector<size_t> idx = token_values(packed, b, t);
        const Shape one = packed ? Shape{1, 1, kN * kD} : Shape{1, kH, 1, kD};
        Vals x1, g1;
        for (size_t i : idx) x1.push_back(xv[i]), g1.push_back(gv[i]);
        const Result want = run_offset(packed, x1, g1, one, p[size_t(b * kT + t)]);
        for (size_t i = 0; i < idx.size(); ++i) {
          EXPECT_EQ(got.y[idx[i]], want.y[i]) << "b " << b << " t " << t;
          EXPECT_EQ(got.dx[idx[i]], want.dx[i]) << "b " << b << " t " << t;
        }
      }
  }
}

// Positions t + offset in every row are the offset overload, bit for bit (f32 too).
TEST(RopePositions, ArangePositionsEqualTheOffsetOverload) {
  Generator gen(4);
  const int64_t offset = 1234;
  std::vector<int64_t> p;
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t t = 0; t < kT; ++t) p.push_back(offset + t);
  const Tensor pos = from_ints(p, {kB, kT}, DType::I32);
  for (DType dt : {DType::F32, DType::BF16}) {
    Tensor x = randn({kB, kT, kN * kD}, gen, 1.0f, dt);
    const std::vector<float> inv = rope_inv_freq(kD, 500000.0);
    EXPECT_EQ(rotary_embedding_packed(x, inv, kRot, pos).to_double_vector(),
              rotary_embedding_packed(x, inv, kRot, offset).to_double_vector())
        << dtype_name(dt);
    Tensor x4 = randn({kB, kH, kT, kD}, gen, 1.0f, dt);
    EXPECT_EQ(rotary_embedding(x4, 10000.0, pos).to_double_vector(),
              rotary_embedding(x4, 10000.0, offset).to_double_vector())
        << dtype_name(dt);
  }
  // and a test that can fail: other positions give other values
  Tensor x = randn({kB, kT, kN * kD}, gen);
  EXPECT_NE(rotary_embedding_packed(x, rope_inv_freq(kD, 1e4), kRot, pos).to_double_vector(),
            rotary_embedding_packed(x, rope_inv_freq(kD, 1e4), kRot, offset + 1).to_double_vector());
}

using lt::test::error_of;

TEST(RopePositions, BadPositionsGiveOneLineErrors) {
  Generator gen(5);
  Tensor x = randn({kB, kT, kN * kD}, gen), x4 = randn({kB, kH, kT, kD}, gen);
  const std::vector<float> inv = rope_inv_freq(kD, 1e4);
  std::vector<int64_t> neg = positions_of(kDocs, 0);
  neg[13] = -2;
  struct Bad {
    Tensor pos;
    const char* says;
  };
  const std::vector<Bad> bads = {
      {from_ints(positions_of(kDocs, 0), {kB, kT}, DType::I64), "positions is i64 [2, 11]"},
      {from_ints(positions_of(kDocs, 0), {kT, kB}, DType::I32), "positions is i32 [11, 2]"},
      {from_ints(neg, {kB, kT}, DType::I32), "positions[1, 2] = -2"},
      {Tensor::empty({kB, kT}, DType::I32, Device::meta()), "different devices"},
      {Tensor(), "positions is undefined"},
  };
  for (const Bad& b : bads)
    for (int packed = 0; packed < 2; ++packed) {
      const std::string e = error_of([&] {
        if (packed) rotary_embedding_packed(x, inv, kRot, b.pos);
        else rotary_embedding(x4, 1e4, b.pos);
      });
      EXPECT_NE(e.find(b.says), std::string::npos) << e;
      EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    }
}

TEST(RopePositions, CudaMatchesCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  Generator gen(6);
  const std::vector<int64_t> p = positions_of({{3, 1, 6, 1}, {11}}, 0);
  for (bool packed : {false, true})
    for (DType dt : {DType::F32, DType::BF16}) {
      SCOPED_TRACE(std::string(packed ? "packed " : "") + dtype_name(dt));
      const Shape shape = packed ? Shape{kB, kT, kN * kD} : Shape{kB, kH, kT, kD};
      const Vals xv = from_vector(randn(shape, gen, 1.0f, DType::F64).to_double_vector(), shape, dt).to_double_vector();
      const Vals gv = from_vector(randn(shape, gen, 1.0f, DType::F64).to_double_vector(), shape, dt).to_double_vector();
      const Result want = run(packed, xv, gv, shape, from_ints(p, {kB, kT}, DType::I32), dt, Device::cpu());
      const Result got =
          run(packed, xv, gv, shape, from_ints(p, {kB, kT}, DType::I32, Device::cuda()), dt, Device::cuda());
      EXPECT_LE(test::rel_error(got.y, want.y), dt == DType::F32 ? 1e-6 : 1e-2) << "y";
      EXPECT_LE(test::rel_error(got.dx, want.dx), dt == DType::F32 ? 1e-6 : 1e-2) << "dx";
    }
}

}  // namespace
