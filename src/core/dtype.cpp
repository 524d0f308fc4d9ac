#include "leantrain/dtype.h"

#include <cmath>

#include "leantrain/error.h"

namespace lt {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F64: case DType::I64: return 8;
    case DType::F32: case DType::I32: return 4;
    case DType::F16: case DType::BF16: return 2;
    case DType::U8: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F64: return "f64";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::U8: return "u8";
  }
  return "?";
}

const char* dtype_safetensors_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F64: return "F64";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::U8: return "U8";
  }
  return "?";
}

DType parse_dtype(std::string_view s) {
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32, DType::I64, DType::U8}) {
    if (s == dtype_name(t) || s == dtype_safetensors_name(t)) return t;
  }
  if (s == "float32" || s == "fp32") return DType::F32;
  if (s == "float64" || s == "fp64") return DType::F64;
  if (s == "float16" || s == "fp16") return DType::F16;
  if (s == "bfloat16") return DType::BF16;
  fail("unknown dtype '" + std::string(s) + "'", "leantrain knows f32, f64, f16, bf16, i32, i64, u8",
       "use one of those names");
}

bool is_floating(DType t) {
  return t == DType::F32 || t == DType::F64 || t == DType::F16 || t == DType::BF16;
}

float half_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ff;
  uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: renormalise
      int e = -1;
      do { man <<= 1; ++e; } while ((man & 0x400) == 0);
      u = sign | uint32_t(127 - 15 - e) << 23 | (man & 0x3ff) << 13;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | (exp + 112) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t float_to_half(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint16_t sign = uint16_t((u >> 16) & 0x8000);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00;      // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00;     // overflow (incl. rounding up) -> inf
  if (a < 0x38800000u) {                          // subnormal or zero in half
    if (a < 0x33000000u) return sign;             // rounds to zero
    uint32_t man = (a & 0x7fffff) | 0x800000;
    int shift = 113 - int(a >> 23) + 13;          // 126 - exp, +13 mantissa shift
    uint32_t half_man = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half_man & 1))) ++half_man;
    return sign | uint16_t(half_man);
  }
  uint32_t r = a + 0xfffu + ((a >> 13) & 1u);     // round to nearest even at bit 13
  return sign | uint16_t((r - 0x38000000u) >> 13);
}

}  // namespace lt
