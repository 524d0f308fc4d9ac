// The one way every CPU reduction sums: in rank order 0, 1, ..., W-1, in f32, rounded to the
// buffer's dtype once at the end. The order is fixed, so results do not depend on which rank's
// data arrived first (MPI's own reductions make no such promise).
#pragma once
#include <cstdint>

#include "leantrain/dist.h"
#include "leantrain/error.h"

namespace lt::dist::detail {

inline float load(const void* p, int64_t i, DType dt) {
  switch (dt) {
    case DType::F32: return static_cast<const float*>(p)[i];
    case DType::BF16: return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
    case DType::F16: return half_to_float(static_cast<const uint16_t*>(p)[i]);
    default: return 0;
  }
}

inline void store(void* p, int64_t i, DType dt, float v) {
  switch (dt) {
    case DType::F32: static_cast<float*>(p)[i] = v; break;
    case DType::BF16: static_cast<uint16_t*>(p)[i] = float_to_bf16(v); break;
    case DType::F16: static_cast<uint16_t*>(p)[i] = float_to_half(v); break;
    default: break;
  }
}

inline void check_reducible(DType dt) {
  if (dt != DType::F32 && dt != DType::BF16 && dt != DType::F16)
    fail(std::string("a reduction over ") + dtype_name(dt) + " values", "collectives reduce f32, bf16 and f16 only",
         "reduce a floating-point buffer");
}

// out[i] = op over r of parts[r * stride + i], r = 0..ranks-1 in that order.
inline void sum_in_rank_order(const void* parts, int64_t stride, int ranks, void* out, int64_t count, DType dt,
                              ReduceOp op) {
  const float inv = 1.0f / float(ranks);
  for (int64_t i = 0; i < count; ++i) {
    float acc = load(parts, i, dt);
    for (int r = 1; r < ranks; ++r) acc += load(parts, int64_t(r) * stride + i, dt);
    store(out, i, dt, op == ReduceOp::Avg ? acc * inv : acc);
  }
}

}  // namespace lt::dist::detail
