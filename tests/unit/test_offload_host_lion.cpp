// The host Lion step of --offload (src/offload/host_lion.*) against the CPU reference
// (CpuBackend::lion_step on f32 tensors, the gradient widened to f32): master, momentum and the
// 16-bit copy bitwise equal for every gradient dtype, odd lengths, 1..8 threads, weight decay on
// and off, each SIMD path this CPU has; sign(0) = 0 is exercised by zero gradients on zero momentum.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "backend/backend.h"
#include "leantrain/ops.h"
#include "offload/host_lion.h"
#include "optim_test_values.h"

using namespace lt;
using namespace lt::offload;

namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

void check(int64_t n, DType grad, DType out, int threads, float wd, SimdPath path) {
  SCOPED_TRACE("n=" + std::to_string(n) + " grad=" + dtype_name(grad) + " out=" + dtype_name(out) +
               " threads=" + std::to_string(threads) + " wd=" + std::to_string(wd) + " " + simd_path_name(path));
  std::vector<float> master = optim_test::values(n, 1, 0), m(static_cast<size_t>(n), 0.0f);
  Tensor rp = from_vector(master, {n}), rm = from_vector(m, {n});
  std::vector<uint16_t> h(static_cast<size_t>(n));
  for (int t = 1; t <= 3; ++t) {
    std::vector<float> g32 = optim_test::values(n, 4, t);
    for (int64_t i = 0; i < std::min<int64_t>(n, 5); ++i) g32[size_t(i)] = 0.0f;  // c = 0 at step 1
    std::vector<uint16_t> g16;
    if (grad != DType::F32)
      for (float& x : g32) {
        g16.push_back(grad == DType::BF16 ? float_to_bf16(x) : float_to_half(x));
        x = grad == DType::BF16 ? bf16_to_float(g16.back()) : half_to_float(g16.back());
      }
    LionArgs a{3e-3f, 0.9f, 0.99f, wd, t == 2 ? 0.5f : 1.0f};
    Tensor rg = from_vector(g32, {n});
    backend_for(Device::cpu()).lion_step({&rp, 1}, {&rg, 1}, {&rm, 1}, a);
    host_lion_step({master.data(), m.data(), g16.empty() ? static_cast<const void*>(g32.data()) : g16.data(), grad,
                    h.data(), out, n},
                   a, threads, path);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(bits_of(rp.data<float>()[i]), bits_of(master[size_t(i)])) << "master " << i << " step " << t;
      ASSERT_EQ(bits_of(rm.data<float>()[i]), bits_of(m[size_t(i)])) << "momentum " << i << " step " << t;
      ASSERT_EQ(out == DType::BF16 ? float_to_bf16(master[size_t(i)]) : float_to_half(master[size_t(i)]), h[size_t(i)])
          << "16-bit copy " << i;
    }
  }
}

}  // namespace

TEST(OffloadHostLion, BitwiseEqualToReference) {
  std::vector<SimdPath> paths{SimdPath::Scalar, SimdPath::Avx2};
  if (simd_path_available(SimdPath::Avx512)) paths.push_back(SimdPath::Avx512);
  for (SimdPath path : paths)
    for (DType grad : {DType::F32, DType::BF16, DType::F16})
      for (DType out : {DType::BF16, DType::F16})
        for (int64_t n : {1, 9, 16, 17, 64 * 3 + 5, 4099, 40003})  // 40003: several chunks
          for (int threads : {1, 3, 8})
            for (float wd : {0.0f, 0.1f}) {
              check(n, grad, out, threads, wd, path);
              if (HasFatalFailure()) return;
            }
}
