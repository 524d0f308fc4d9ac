// The rotary kernel's 16-byte path (rope_vec_kernel: whole packs of pairs) against its 2-byte one
// (rope_kernel), bit for bit on the GPU: the same op on the same values, once from 16-byte
// aligned buffers and once from buffers one element off (which only the per-element kernel
// takes). Forward and inverse (the backward's) rotations; TinyLlama's packed q | k | v (v passed
// through), partial rotary (a pass-through tail in each rotated head), a 128 head dim, per-token
// positions; bf16, f16 and f32. Skipped without a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "leantrain/cuda_info.h"
#include "leantrain/ops.h"
#include "ops/op_common.h"
#include "unit/tensor_bytes.h"

using namespace lt;

namespace {

using test::bytes_of;

// A [R, T, N, D] tensor at element `shift` of a buffer one element longer.
Tensor at_shift(const Tensor& src, int64_t shift) {
  Tensor buf = Tensor::empty({src.numel() + 1}, src.dtype(), src.device());
  Tensor v = make_view(buf, src.shape(), contiguous_strides(src.shape()), shift);
  copy_(v, src);
  return v;
}

void check(int64_t R, int64_t T, int64_t N, int64_t D, int64_t rh, int64_t rot_heads, DType dt, bool per_token) {
  const std::string what = dtype_name(dt) + std::string(" [") + std::to_string(R) + ", " + std::to_string(T) + ", " +
                           std::to_string(N) + ", " + std::to_string(D) + "] rh " + std::to_string(rh) +
                           (per_token ? " positions" : "");
  Generator gen(21);
  Tensor x = randn({R, T, N, D}, gen, 1.0f, DType::F32).to(dt).to(Device::cuda());
  std::vector<float> inv = rope_inv_freq(2 * rh, 10000.0);
  Tensor pos;
  if (per_token) {
    std::vector<int32_t> p(size_t(R * T));
    for (size_t i = 0; i < p.size(); ++i) p[i] = int32_t((i * 7) % 97);
    pos = Tensor::empty({R, T}, DType::I32, Device::cpu());
    std::memcpy(pos.raw_data(), p.data(), p.size() * sizeof(int32_t));
    pos = pos.to(Device::cuda());
  }
  for (bool inverse : {false, true}) {
    Tensor fast = Tensor::empty(x.shape(), dt, x.device());
    detail::backend_of(x).rope(fast, x, inv, 5, pos, rot_heads, inverse);
    Tensor xs = at_shift(x, 1), slow = at_shift(fast, 1);
    detail::backend_of(x).rope(slow, xs, inv, 5, pos, rot_heads, inverse);
    EXPECT_EQ(bytes_of(fast), bytes_of(slow)) << what << (inverse ? " inverse" : " forward");
    EXPECT_NE(bytes_of(fast), bytes_of(x)) << what << ": nothing rotated";
  }
}

TEST(RopeVec, CudaSixteenBytePathIsThePerElementPathsBits) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  for (DType dt : {DType::BF16, DType::F16, DType::F32}) {
    check(2, 33, 4 + 2 + 2, 64, 32, 6, dt, false);   // TinyLlama's heads: 4 q, 2 k rotated, 2 v copied
    check(1, 17, 3, 64, 16, 2, dt, false);           // partial rotary: 32 of 64 dims turn
    check(2, 9, 2 + 1 + 1, 128, 64, 3, dt, true);    // a 128 head dim, per-token positions
  }
}

}  // namespace
