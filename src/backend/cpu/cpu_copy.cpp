#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_common.h"
#include "leantrain/random.h"

namespace lt {
using namespace cpu;

namespace {

template <class T> double to_double(const T* p, int64_t i) {
  if constexpr (std::is_same_v<T, bf16_t> || std::is_same_v<T, f16_t>) return load(p, i);
  else return double(p[i]);
}
template <class T> void from_double(T* p, int64_t i, double v) {
  if constexpr (std::is_same_v<T, bf16_t> || std::is_same_v<T, f16_t>) store(p, i, float(v));
  else if constexpr (std::is_integral_v<T>) p[i] = T(std::llround(v));
  else p[i] = T(v);
}

}  // namespace

void CpuBackend::fill(const Tensor& out, double value) {
  const int64_t n = out.numel();
  dispatch_all(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* p = out.data<T>();
    T v;
    from_double(&v, 0, value);
    for (int64_t i = 0; i < n; ++i) p[i] = v;
  });
}

void CpuBackend::copy(const Tensor& dst, const Tensor& src) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous()) {
    std::memcpy(dst.raw_data(), src.raw_data(), size_t(dst.nbytes()));
    return;
  }
  const bool dc = dst.is_contiguous(), sc = src.is_contiguous();
  dispatch_all(dst.dtype(), [&](auto dtag) {
    using D = decltype(dtag);
    dispatch_all(src.dtype(), [&](auto stag) {
      using S = decltype(stag);
      D* d = dst.data<D>();
      const S* s = src.data<S>();
      // Integer-to-integer and same-type copies must not round through double.
      auto conv = [&](int64_t di, int64_t si) {
        if constexpr (std::is_same_v<D, S>) d[di] = s[si];
        else if constexpr (std::is_integral_v<D> && std::is_integral_v<S>) d[di] = D(s[si]);
        else from_double(d, di, to_double(s, si));
      };
      for (int64_t i = 0; i < n; ++i) {
        int64_t di = dc ? i : strided_offset(i, dst.shape(), dst.strides());
        int64_t si = sc ? i : strided_offset(i, src.shape(), src.strides());
        conv(di, si);
      }
    });
  });
}

void CpuBackend::copy_from_host(const Tensor& dst, const void* src) {
  std::memcpy(dst.raw_data(), src, size_t(dst.nbytes()));
}

void CpuBackend::copy_to_host(void* dst, const Tensor& src) { std::memcpy(dst, src.raw_data(), size_t(src.nbytes())); }

void CpuBackend::fill_random(const Tensor& out, RandomKind kind, float a, float b, uint64_t seed, uint64_t offset) {
  const int64_t n = out.numel();
  dispatch_float(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* p = out.data<T>();
    for (int64_t i = 0; i < n; ++i) {
      float v = kind == RandomKind::Normal ? a + b * rng_normal(seed, offset + uint64_t(i))
                                           : a + (b - a) * rng_uniform(seed, offset + uint64_t(i));
      store(p, i, v);
    }
  });
}

}  // namespace lt
