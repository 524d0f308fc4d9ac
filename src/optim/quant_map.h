// The 256-entry dynamic quantisation maps of the 8-bit optimizers (see quant_map.cpp).
#pragma once

namespace lt {

// 256 ascending floats in [-1, 1] (first moments: signed) or [0, 1] (second moments: unsigned),
// built once; the backends look values up by code and requantise to the nearest entry.
const float* dynamic_map_signed();
const float* dynamic_map_unsigned();

}  // namespace lt
