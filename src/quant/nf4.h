// NF4 weights with double-quantised statistics, the state of bitsandbytes'
// quantize_4bit(quant_type="nf4", blocksize=64, compress_statistics=True):
//   codes          u8 [(n + 1) / 2]   two 4-bit codes per byte, first element high   ("weight")
//   absmax_codes   u8 [ceil(n / 64)]  each block's absmax, 8-bit, minus offset       ("weight.absmax")
//   nested_absmax  f32 [ceil(n / 64 / 256)]  absmax of each 256 absmax codes          ("weight.nested_absmax")
//   nested_map     256 f32: bitsandbytes' signed dynamic map                         ("weight.nested_quant_map")
//   offset         the mean of the f32 absmax values, subtracted before quantising them
// The 16-value NF4 map itself ("weight.quant_map") is fixed: backend/nf4.h's nf4_value.
#pragma once
#include <span>
#include <vector>

#include "leantrain/tensor.h"

namespace lt {

struct Nf4Weight {
  Shape shape;                    // of the original tensor
  DType dtype = DType::BF16;      // of the original tensor (what dequantisation gives back by default)
  Tensor codes, absmax_codes, nested_absmax;
  std::vector<float> nested_map;  // 256 values, host
  float offset = 0.0f;
};

// Quantises w (f32, f16 or bf16, contiguous, any device). The offset is the mean of the block
// absmax values accumulated in double and rounded once to f32 (bitsandbytes takes torch's f32
// mean, whose summation order depends on the device: the two can differ in the last bits).
// On the meta device the offset is 0 (no values to average).
// `nested_map` (256 ascending values) quantises the absmax; bitsandbytes' signed dynamic map by
// default. A caller that must match a given file's bits passes that file's map.
Nf4Weight nf4_quantize(const Tensor& w, std::span<const float> nested_map = {});

// As nf4_quantize, into a state whose codes, absmax_codes and nested_absmax already exist (views
// of a parameter store, sized for w's numel; on w's device): only the f32 block absmax is a
// temporary. Sets shape, dtype, offset and nested_map.
void nf4_quantize_into(const Tensor& w, Nf4Weight& q, std::span<const float> nested_map = {});

// The f32 absmax of every 64-block: nested_map[absmax_codes] * nested_absmax + offset.
Tensor nf4_block_absmax(const Nf4Weight& q);

// The dequantised weight, q.shape, in `dtype` (f32, f16 or bf16).
Tensor nf4_dequantize(const Nf4Weight& q, DType dtype);

}  // namespace lt
