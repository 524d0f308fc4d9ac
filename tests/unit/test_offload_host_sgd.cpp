// The host SGD step of --offload (src/offload/host_sgd.*) against the CPU reference
// (CpuBackend::sgd_step on f32 tensors, the gradient widened to f32): master, momentum buffer and
// 16-bit copy bitwise equal with and without momentum, dampening, Nesterov, weight decay, for
// every gradient dtype, odd lengths, 1..8 threads and each SIMD path this CPU has.
#include <gtest/gtest.h>

#include <cstring>

#include "backend/backend.h"
#include "leantrain/ops.h"
#include "offload/host_sgd.h"
#include "optim_test_values.h"

using namespace lt;
using namespace lt::offload;

namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

struct Case {
  int64_t n;
  DType grad, out;
  int threads;
  float wd, momentum, dampening;
  bool nesterov;
  SimdPath path;
};

void check(const Case& c) {
  SCOPED_TRACE("n=" + std::to_string(c.n) + " grad=" + dtype_name(c.grad) + " out=" + dtype_name(c.out) +
               " threads=" + std::to_string(c.threads) + " wd=" + std::to_string(c.wd) + " momentum=" +
               std::to_string(c.momentum) + " nesterov=" + std::to_string(c.nesterov) + " " + simd_path_name(c.path));
  const int64_t n = c.n;
  std::vector<float> master = optim_test::values(n, 1, 0), buf(static_cast<size_t>(n), 0.0f);
  Tensor rp = from_vector(master, {n}), rb = from_vector(buf, {n});
  const bool has_buf = c.momentum != 0.0f;
  std::vector<uint16_t> h(static_cast<size_t>(n));
  for (int t = 1; t <= 3; ++t) {
    std::vector<float> g32 = optim_test::values(n, 4, t);
    std::vector<uint16_t> g16;
    if (c.grad != DType::F32)
      for (float& x : g32) {
        g16.push_back(c.grad == DType::BF16 ? float_to_bf16(x) : float_to_half(x));
        x = c.grad == DType::BF16 ? bf16_to_float(g16.back()) : half_to_float(g16.back());
      }
    SgdArgs a{5e-2f, c.momentum, c.dampening, c.wd, c.nesterov, t == 1, t == 2 ? 0.5f : 1.0f};
    Tensor rg = from_vector(g32, {n});
    std::vector<Tensor> bufs;
    if (has_buf) bufs.push_back(rb);
    backend_for(Device::cpu()).sgd_step({&rp, 1}, {&rg, 1}, bufs, a);
    host_sgd_step({master.data(), has_buf ? buf.data() : nullptr,
                   g16.empty() ? static_cast<const void*>(g32.data()) : g16.data(), c.grad, h.data(), c.out, n},
                  a, c.threads, c.path);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(bits_of(rp.data<float>()[i]), bits_of(master[size_t(i)])) << "master " << i << " step " << t;
      if (has_buf) ASSERT_EQ(bits_of(rb.data<float>()[i]), bits_of(buf[size_t(i)])) << "buffer " << i << " step " << t;
      ASSERT_EQ(c.out == DType::BF16 ? float_to_bf16(master[size_t(i)]) : float_to_half(master[size_t(i)]),
                h[size_t(i)])
          << "16-bit copy " << i;
    }
  }
}

}  // namespace

TEST(OffloadHostSgd, BitwiseEqualToReference) {
  std::vector<SimdPath> paths{SimdPath::Scalar, SimdPath::Avx2};
  if (simd_path_available(SimdPath::Avx512)) paths.push_back(SimdPath::Avx512);
  for (SimdPath path : paths)
    for (DType grad : {DType::F32, DType::BF16, DType::F16})
      for (int64_t n : {1, 9, 17, 64 * 3 + 5, 4099, 40003})  // 40003: several chunks
        for (int threads : {1, 3, 8})
          for (float wd : {0.0f, 1e-2f}) {
            const Case cases[] = {{n, grad, DType::BF16, threads, wd, 0.0f, 0.0f, false, path},
                                  {n, grad, DType::F16, threads, wd, 0.9f, 0.1f, false, path},
                                  {n, grad, DType::BF16, threads, wd, 0.9f, 0.0f, true, path}};
            for (const Case& c : cases) {
              check(c);
              if (HasFatalFailure()) return;
            }
          }
}
