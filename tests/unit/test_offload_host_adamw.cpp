// The host AdamW step of --offload optimizer (src/offload/host_adamw.*) against the CPU reference
// update (CpuBackend::adamw_step on f32 tensors, the gradient widened to f32): master weights,
// moments and the 16-bit parameter copy bitwise equal, for every gradient dtype, odd lengths,
// 1..8 threads, with and without weight decay, on each SIMD path this CPU has.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <limits>

#include "backend/backend.h"
#include "error_of.h"
#include "leantrain/ops.h"
#include "offload/host_adamw.h"
#include "optim_test_values.h"

using namespace lt;
using namespace lt::offload;
using lt::test::error_of;

namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// The gradient as stored (raw bits for bf16/f16) and widened to f32 for the reference.
struct Grad {
  std::vector<float> f32;
  std::vector<uint16_t> h;
  const void* data() const { return h.empty() ? static_cast<const void*>(f32.data()) : h.data(); }
};

Grad make_grad(int64_t n, DType dt, int t) {
  Grad g;
  g.f32 = optim_test::values(n, 4, t);
  if (dt == DType::F32) return g;
  for (float& x : g.f32) {
    g.h.push_back(dt == DType::BF16 ? float_to_bf16(x) : float_to_half(x));
    x = dt == DType::BF16 ? bf16_to_float(g.h.back()) : half_to_float(g.h.back());
  }
  return g;
}

std::vector<float> to_floats(const Tensor& t) {
  const float* p = t.data<float>();
  return std::vector<float>(p, p + t.numel());
}

void expect_same_bits(const std::vector<float>& want, const float* got, const std::string& what) {
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_EQ(bits_of(want[i]), bits_of(got[i])) << what << " element " << i << " of " << want.size();
}

struct Case {
  int64_t n;
  DType grad;
  bool has_out;
  DType out;
  int threads;
  float wd;
  SimdPath path;
};

std::string name_of(const Case& c) {
  return std::string("n=") + std::to_string(c.n) + " grad=" + dtype_name(c.grad) +
         " out=" + (c.has_out ? dtype_name(c.out) : "none") + " threads=" + std::to_string(c.threads) +
         " wd=" + std::to_string(c.wd) + " path=" + simd_path_name(c.path);
}

// Three steps from the same state on both sides; every step's bits compared.
void check_case(const Case& c) {
  SCOPED_TRACE(name_of(c));
  std::vector<float> master = optim_test::values(c.n, 1, 0), m = optim_test::values(c.n, 2, 0);
  std::vector<float> v = optim_test::values(c.n, 3, 0);
  for (float& x : v) x = std::abs(x) * 0.01f;
  Tensor rp = from_vector(master, {c.n}), rm = from_vector(m, {c.n}), rv = from_vector(v, {c.n});
  std::vector<uint16_t> out(size_t(c.n), 0xdead);
  for (int t = 1; t <= 3; ++t) {
    const Grad g = make_grad(c.n, c.grad, t);
    AdamWArgs a{1e-2f, 0.9f, 0.999f, 1e-8f, c.wd, t, t == 2 ? 0.5f : 1.0f};
    Tensor rg = from_vector(g.f32, {c.n});
    backend_for(Device::cpu()).adamw_step({&rp, 1}, {&rg, 1}, {&rm, 1}, {&rv, 1}, a);

    HostAdamWSpan s{master.data(), m.data(), v.data(), g.data(), c.grad,
                    c.has_out ? out.data() : nullptr, c.out, c.n};
    host_adamw_step(s, a, c.threads, c.path);
    expect_same_bits(to_floats(rp), master.data(), "master");
    expect_same_bits(to_floats(rm), m.data(), "exp_avg");
    expect_same_bits(to_floats(rv), v.data(), "exp_avg_sq");
    if (c.has_out)
      for (int64_t i = 0; i < c.n; ++i)
        ASSERT_EQ(out[size_t(i)], c.out == DType::BF16 ? float_to_bf16(master[size_t(i)]) : float_to_half(master[size_t(i)]))
            << "16-bit copy element " << i;
    if (::testing::Test::HasFatalFailure()) return;
  }
}

std::vector<SimdPath> paths_here() {
  std::vector<SimdPath> p{SimdPath::Scalar, SimdPath::Avx2};
  if (simd_path_available(SimdPath::Avx512)) p.push_back(SimdPath::Avx512);
  return p;
}

}  // namespace

TEST(OffloadHostAdamW, BitwiseEqualToReference) {
  for (SimdPath path : paths_here())
    for (DType grad : {DType::F32, DType::BF16, DType::F16})
      for (DType out : {DType::BF16, DType::F16})
        for (int64_t n : {1, 7, 8, 15, 16, 17, 33, 64 * 3 + 5, 4099, 40003})  // 40003: several chunks
          for (int threads : {1, 2, 3, 8})
            for (float wd : {0.0f, 0.1f}) {
              check_case({n, grad, true, out, threads, wd, path});
              if (HasFatalFailure()) return;
            }
}

TEST(OffloadHostAdamW, WithoutSixteenBitCopy) {
  for (SimdPath path : paths_here())
    for (DType grad : {DType::F32, DType::BF16}) {
      check_case({1000 + 3, grad, false, DType::BF16, 3, 0.1f, path});
      if (HasFatalFailure()) return;
    }
}

// The 16-bit rounding on its own: lr 0 keeps every master value (any bit pattern: NaN, inf,
// subnormals, values at the f16 overflow edge and at rounding ties), so the copy must equal
// float_to_bf16 / float_to_half of each, lane by lane.
TEST(OffloadHostAdamW, SixteenBitCopyRoundsAsReference) {
  std::vector<float> master;
  uint32_t x = 12345;
  for (int i = 0; i < 20000; ++i) {
    x = x * 1664525u + 1013904223u;
    float f;
    std::memcpy(&f, &x, 4);
    master.push_back(f);
  }
  for (float f : {65504.0f, 65519.99f, 65520.0f, -65520.0f, 5.9604645e-8f, 2.9802322e-8f, 1e-45f, -0.0f,
                  std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::quiet_NaN()})
    master.push_back(f);
  for (uint32_t u : {0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0xff800001u, 0x7fc00001u})
    master.push_back(std::bit_cast<float>(u));
  const int64_t n = int64_t(master.size());
  for (SimdPath path : paths_here())
    for (DType out : {DType::BF16, DType::F16}) {
      SCOPED_TRACE(std::string(simd_path_name(path)) + " " + dtype_name(out));
      std::vector<float> p = master, m(master.size(), 0.5f), v(master.size(), 0.25f), g(master.size(), 1.0f);
      std::vector<uint16_t> h(master.size());
      host_adamw_step({p.data(), m.data(), v.data(), g.data(), DType::F32, h.data(), out, n},
                      AdamWArgs{0.0f, 0.9f, 0.999f, 1e-8f, 0.0f, 1, 1.0f}, 2, path);
      for (size_t i = 0; i < master.size(); ++i) {
        const uint16_t want = out == DType::BF16 ? float_to_bf16(p[i]) : float_to_half(p[i]);
        ASSERT_EQ(want, h[i]) << "element " << i << " bits " << std::hex << bits_of(p[i]);
        if (!std::isnan(master[i])) ASSERT_EQ(bits_of(master[i]), bits_of(p[i])) << "element " << i;
      }
    }
}

TEST(OffloadHostAdamW, ThreadCountDoesNotChangeBits) {
  const int64_t n = 100003;
  std::vector<float> base = optim_test::values(n, 7, 0);
  const Grad g = make_grad(n, DType::BF16, 1);
  std::vector<float> want;
  for (int threads : {1, 2, 5, 16}) {
    std::vector<float> p = base, m(size_t(n), 0.0f), v(size_t(n), 0.0f);
    std::vector<uint16_t> h(static_cast<size_t>(n));
    host_adamw_step({p.data(), m.data(), v.data(), g.data(), DType::BF16, h.data(), DType::BF16, n},
                    AdamWArgs{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 1.0f}, threads, best_simd_path());
    if (want.empty()) want = p;
    else expect_same_bits(want, p.data(), "master with " + std::to_string(threads) + " threads");
  }
}

TEST(OffloadHostAdamW, RefusesWhatItDoesNotDo) {
  std::vector<float> p(4), m(4), v(4), g(4);
  HostAdamWSpan s{p.data(), m.data(), v.data(), g.data(), DType::F32, nullptr, DType::BF16, 4};
  AdamWArgs a{1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 1, 1.0f};
  EXPECT_NE(error_of([&] { host_adamw_step(s, a, 0, SimdPath::Avx2); }).find("threads"), std::string::npos);
  HostAdamWSpan bad = s;
  bad.grad_dtype = DType::I32;
  EXPECT_NE(error_of([&] { host_adamw_step(bad, a, 1, SimdPath::Avx2); }).find("gradient dtype"), std::string::npos);
  std::vector<uint64_t> streams{1};
  a.sr.streams = streams;
  EXPECT_NE(error_of([&] { host_adamw_step(s, a, 1, SimdPath::Avx2); }).find("stochastic"), std::string::npos);
}

// The AVX-512 path against the scalar one on many elements (skipped, visibly, on a CPU without it).
TEST(OffloadHostAdamW, Avx512PathWhereTheCpuHasIt) {
  if (!simd_path_available(SimdPath::Avx512)) GTEST_SKIP() << "this CPU has no AVX-512F/BW/VL";
  EXPECT_EQ(best_simd_path(), SimdPath::Avx512);
  const int64_t n = 50021;
  const Grad g = make_grad(n, DType::F16, 2);
  std::vector<float> base = optim_test::values(n, 9, 0);
  std::vector<float> p1 = base, m1(size_t(n), 0.01f), v1(size_t(n), 1e-4f), p2 = p1, m2 = m1, v2 = v1;
  std::vector<uint16_t> h1(static_cast<size_t>(n)), h2(static_cast<size_t>(n));
  const AdamWArgs a{1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, 5, 1.0f};
  host_adamw_step({p1.data(), m1.data(), v1.data(), g.data(), DType::F16, h1.data(), DType::F16, n}, a, 4,
                  SimdPath::Avx512);
  host_adamw_step({p2.data(), m2.data(), v2.data(), g.data(), DType::F16, h2.data(), DType::F16, n}, a, 1,
                  SimdPath::Scalar);
  expect_same_bits(p2, p1.data(), "master");
  expect_same_bits(v2, v1.data(), "exp_avg_sq");
  EXPECT_EQ(h1, h2);
}

// On 64-byte aligned buffers (as the pinned state is) the AVX-512 path streams its stores past
// the caches after a scalar head; the bits stay the scalar path's whatever the head's length
// (the views start 0, 5, 16 and 27 elements into the buffers, and the 16-bit copy at its own
// offset, which leaves the streaming loop out where the alignments disagree).
TEST(OffloadHostAdamW, StreamingStoresOnAlignedBuffersKeepTheBits) {
  if (!simd_path_available(SimdPath::Avx512)) GTEST_SKIP() << "this CPU has no AVX-512F/BW/VL";
  const int64_t n = 40000;
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  auto aligned = [&](size_t bytes) { return std::unique_ptr<char, Free>(static_cast<char*>(std::aligned_alloc(64, bytes))); };
  for (DType out : {DType::BF16, DType::F16})
    for (int64_t head : {0, 5, 16, 27})
      for (int64_t out_head : {head, head + 1}) {
        const Grad g = make_grad(n, DType::BF16, 3);
        const std::vector<float> base = optim_test::values(n, 11, 0);
        auto buf = aligned(size_t(4 * 3 * (n + 64) + 2 * (n + 64)));
        float* p = reinterpret_cast<float*>(buf.get()) + head;
        float* m = p + (n + 64);  // n + 64 floats: each view keeps the same offset from a 64-byte line
        float* v = m + (n + 64);
        uint16_t* h = reinterpret_cast<uint16_t*>(buf.get() + 4 * 3 * (n + 64)) + out_head;
        std::copy(base.begin(), base.end(), p);
        std::fill_n(m, n, 0.01f);
        std::fill_n(v, n, 1e-4f);
        std::vector<float> p2 = base, m2(size_t(n), 0.01f), v2(size_t(n), 1e-4f);
        std::vector<uint16_t> h2(static_cast<size_t>(n));
        const AdamWArgs a{1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, 3, 1.0f};
        host_adamw_step({p, m, v, g.data(), DType::BF16, h, out, n}, a, 3, SimdPath::Avx512);
        host_adamw_step({p2.data(), m2.data(), v2.data(), g.data(), DType::BF16, h2.data(), out, n}, a, 1,
                        SimdPath::Scalar);
        const std::string what = std::string(dtype_name(out)) + " head " + std::to_string(head) + "/" +
                                 std::to_string(out_head);
        expect_same_bits(p2, p, "master, " + what);
        expect_same_bits(m2, m, "exp_avg, " + what);
        expect_same_bits(v2, v, "exp_avg_sq, " + what);
        EXPECT_TRUE(std::equal(h2.begin(), h2.end(), h)) << what;
      }
}
