// Stochastic rounding of the optimizer kernels' parameter stores (backend.h StochasticRounding):
// element i of tensor k is rounded with random.h's sr_round_bf16/f16 and rng_bits32(stream_k, i),
// exactly as cpu_sr.h does, then stored (the rounded value is representable, so the store's
// round to nearest is exact). The per-tensor streams travel BY VALUE beside the kernel's table.
#pragma once
#include <span>

#include "backend/backend.h"
#include "backend/cuda/cuda_strided.cuh"
#include "leantrain/random.h"

namespace lt::cuda {

template <int N> struct SrTable {
  uint64_t stream[N];
  int on;  // 0: round to nearest
};

__device__ __forceinline__ void store_param(void* p, int64_t i, uint8_t dt, float v, int sr, uint64_t stream) {
  if (sr) {
    if (dt == kBF16) v = sr_round_bf16(v, rng_bits32(stream, uint64_t(i)));
    else if (dt == kF16) v = sr_round_f16(v, rng_bits32(stream, uint64_t(i)));
  }
  store_float(p, i, dt, v);
}

// Hands out the streams of consecutive tables. The table fillers (mt_for_each_table,
// q8_for_each_table) skip empty tensors, so the cursor skips them too: take(count) returns the
// streams of the next `count` non-empty parameters, in order.
template <int N> struct SrCursor {
  std::span<const Tensor> params;
  std::span<const uint64_t> streams;
  size_t next = 0;
  SrCursor(std::span<const Tensor> p, const StochasticRounding& sr) : params(p), streams(sr.streams) {
    LT_CHECK(streams.empty() || streams.size() == params.size(),
             "stochastic rounding: " + std::to_string(streams.size()) + " streams for " +
                 std::to_string(params.size()) + " parameters",
             "each parameter needs one", "pass one stream per parameter or none");
  }
  SrTable<N> take(int count) {
    SrTable<N> t{};
    t.on = streams.empty() ? 0 : 1;
    for (int k = 0; k < count; ++k) {
      while (next < params.size() && params[next].numel() == 0) ++next;
      LT_ASSERT(next < params.size());
      if (t.on) t.stream[k] = streams[next];
      ++next;
    }
    return t;
  }
};

}  // namespace lt::cuda
