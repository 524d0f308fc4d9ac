// Element types. f16/bf16 are stored as raw 16-bit patterns; arithmetic converts to float.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace lt {

enum class DType : uint8_t { F32, F64, F16, BF16, I32, I64, U8 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);          // "f32", "bf16", ...
const char* dtype_safetensors_name(DType t);  // "F32", "BF16", ...
DType parse_dtype(std::string_view s);    // accepts both spellings; throws lt::Error
bool is_floating(DType t);

// Round-to-nearest-even conversions, identical on CPU and GPU.
inline float bf16_to_float(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);

}  // namespace lt
