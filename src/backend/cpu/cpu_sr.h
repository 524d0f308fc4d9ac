// Parameter stores of the CPU optimizer kernels, with optional stochastic rounding
// (backend.h StochasticRounding). The CUDA kernels round with the same random.h functions and
// the same (stream, element) counters, so both backends store the same bits.
#pragma once
#include <type_traits>

#include "backend/backend.h"
#include "backend/cpu/cpu_common.h"
#include "leantrain/error.h"
#include "leantrain/random.h"

namespace lt::cpu {

// Tensor k's stream, or nullopt-like {false, 0} when rounding is to nearest.
struct SrStream {
  bool on = false;
  uint64_t stream = 0;
};
inline SrStream sr_stream_of(const StochasticRounding& sr, size_t count, size_t k) {
  if (sr.streams.empty()) return {};
  LT_ASSERT(sr.streams.size() == count);
  return {true, sr.streams[k]};
}

// Stores the updated parameter value v at element i: to nearest, or stochastically for bf16/f16.
template <class T> inline void st_param(T* p, int64_t i, acc_t<T> v, const SrStream& s) {
  if constexpr (std::is_same_v<T, bf16_t>) {
    if (s.on) return store(p, i, sr_round_bf16(float(v), rng_bits32(s.stream, uint64_t(i))));
  } else if constexpr (std::is_same_v<T, f16_t>) {
    if (s.on) return store(p, i, sr_round_f16(float(v), rng_bits32(s.stream, uint64_t(i))));
  }
  st(p, i, v);
}

}  // namespace lt::cpu
