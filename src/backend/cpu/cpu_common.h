// Helpers shared by the CPU kernels: typed load/store with f16/bf16 conversion, dtype dispatch,
// and a strided index walker.
#pragma once
#include <cstdint>
#include <type_traits>
#include <vector>

#include "leantrain/dtype.h"
#include "leantrain/error.h"
#include "leantrain/tensor.h"

namespace lt::cpu {

struct bf16_t { uint16_t bits; };
struct f16_t { uint16_t bits; };

template <class T> inline float load(const T* p, int64_t i) { return float(p[i]); }
template <> inline float load<bf16_t>(const bf16_t* p, int64_t i) { return bf16_to_float(p[i].bits); }
template <> inline float load<f16_t>(const f16_t* p, int64_t i) { return half_to_float(p[i].bits); }
inline double loadd(const double* p, int64_t i) { return p[i]; }

template <class T> inline void store(T* p, int64_t i, float v) { p[i] = T(v); }
template <> inline void store<bf16_t>(bf16_t* p, int64_t i, float v) { p[i].bits = float_to_bf16(v); }
template <> inline void store<f16_t>(f16_t* p, int64_t i, float v) { p[i].bits = float_to_half(v); }

// Accumulation type: double for double storage, float otherwise.
template <class T> struct Acc { using type = float; };
template <> struct Acc<double> { using type = double; };
template <class T> using acc_t = typename Acc<T>::type;

template <class T> inline acc_t<T> ld(const T* p, int64_t i) { return acc_t<T>(load(p, i)); }
template <> inline double ld<double>(const double* p, int64_t i) { return p[i]; }
template <class T> inline void st(T* p, int64_t i, acc_t<T> v) { store(p, i, float(v)); }
template <> inline void st<double>(double* p, int64_t i, double v) { p[i] = v; }
// v rounded to T and read back in the accumulation type (what storing it in a tensor does).
template <class T> inline acc_t<T> rounded(acc_t<T> v) {
  T t;
  st(&t, 0, v);
  return ld(&t, 0);
}

// Auxiliary statistics (mean, rstd, lse, per-row losses) are stored in the accumulation type.
template <class A> A* aux_data(const Tensor& t) {
  LT_ASSERT(t.dtype() == (std::is_same_v<A, double> ? DType::F64 : DType::F32));
  return t.data<A>();
}

// Calls f(T{}) with T the C++ storage type of a floating dtype.
template <class F> void dispatch_float(DType t, F&& f) {
  switch (t) {
    case DType::F32: f(float{}); return;
    case DType::F64: f(double{}); return;
    case DType::BF16: f(bf16_t{}); return;
    case DType::F16: f(f16_t{}); return;
    default: fail(std::string("dtype ") + dtype_name(t) + " is not supported here", "this op needs a floating dtype",
                  "cast to f32, bf16 or f16");
  }
}

// Calls f(T{}) for any dtype (integers included).
template <class F> void dispatch_all(DType t, F&& f) {
  switch (t) {
    case DType::I32: f(int32_t{}); return;
    case DType::I64: f(int64_t{}); return;
    case DType::U8: f(uint8_t{}); return;
    default: dispatch_float(t, f);
  }
}

// The element offset of linear index i (row-major over shape) in a strided tensor.
inline int64_t strided_offset(int64_t i, const Shape& shape, const Shape& strides) {
  int64_t off = 0;
  for (size_t d = shape.size(); d-- > 0;) {
    int64_t s = shape[d];
    off += (i % s) * strides[d];
    i /= s;
  }
  return off;
}

// Reads index ids[i] of an i32/i64 tensor.
inline int64_t load_index(const Tensor& ids, int64_t i) {
  return ids.dtype() == DType::I64 ? ids.data<int64_t>()[i] : int64_t(ids.data<int32_t>()[i]);
}

}  // namespace lt::cpu
