// Shared by the 8-bit optimizers: how one moment of one parameter is stored.
#pragma once
#include <utility>

#include "backend/quant8.h"
#include "leantrain/ops.h"

namespace lt {

// Quantised: u8 codes of the parameter's shape and f32 absmax [ceil(n/256)] (absmax 0 decodes
// every code to 0, so zeros are a zero state). Otherwise the moment in f32 and an empty [0]
// absmax: a view of the moment, so it owns no memory and adds nothing to the state bytes.
inline std::pair<Tensor, Tensor> q8_moment(const Tensor& p, bool quantised, Device device) {
  if (!quantised) {
    Tensor m = zeros(p.shape(), DType::F32, device);
    return {m, make_view(m, {0}, {1}, 0)};
  }
  return {zeros(p.shape(), DType::U8, device), zeros({quant_blocks(p.numel())}, DType::F32, device)};
}

inline bool q8_is_quantised(const Tensor& first_state) { return first_state.dtype() == DType::U8; }

}  // namespace lt
