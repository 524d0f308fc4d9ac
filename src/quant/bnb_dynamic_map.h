// bitsandbytes' signed 8-bit dynamic map (functional.py, create_dynamic_map(signed=True)) with the
// f32 roundings its torch code makes, for the nested quantisation of NF4 absmax values.
#pragma once
#include <span>

namespace lt {

// 256 ascending f32 values; the same array on every call.
std::span<const float> bnb_dynamic_map_signed();

}  // namespace lt
