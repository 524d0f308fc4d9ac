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

// A stacked mixture-of-experts weight [E, d1, d2] in NF4 (transformers 5's experts.gate_up_proj
// [E, 2I, C], experts.down_proj [E, C, I]): each expert's [d1, d2] cut along d1 into `parts`
// pieces of [d1 / parts, d2], each quantised apart as a bitsandbytes state of its own (its own
// block statistics and offset), piece p = e * parts + j. These are the hub's per-expert tensors
// (gate_proj and up_proj, down_proj) and what bitsandbytes keeps per expert Linear4bit, so a
// piece reads and writes as one of them. The pieces share one nested map.
struct Nf4Stack {
  Shape shape;                    // [E, d1, d2]
  int64_t parts = 1;
  DType dtype = DType::BF16;      // of the original weights
  Tensor codes;                   // u8 [E parts, (n + 1) / 2], n = d1 / parts * d2
  Tensor absmax_codes;            // u8 [E parts, ceil(n / 64)]
  Tensor nested_absmax;           // f32 [E parts, ceil(blocks / 256)]
  std::vector<float> offsets;     // E parts, host
  std::vector<float> nested_map;  // 256 values, host

  int64_t experts() const { return shape[0]; }
  int64_t pieces() const { return shape[0] * parts; }
  Shape piece_shape() const { return {shape[1] / parts, shape[2]}; }
  int64_t piece_numel() const { return shape[1] / parts * shape[2]; }
  // Piece p as one NF4 weight (views of the stack's rows, the piece's offset).
  Nf4Weight piece(int64_t p) const;
};

// The shapes of the state of `shape` cut into `parts` ([pieces, bytes], [pieces, blocks],
// [pieces, nested blocks]); checks that parts divides d1.
struct Nf4StackShapes {
  Shape codes, absmax_codes, nested_absmax;
};
Nf4StackShapes nf4_stack_shapes(const Shape& shape, int64_t parts);

// Experts [e0, e0 + count) dequantised into out [count, d1, d2] (contiguous; f32, f16 or bf16):
// one launch (backend/moe_ops.def, nf4_dequantize_pieces).
void nf4_stack_dequantize_into(const Nf4Stack& w, int64_t e0, int64_t count, const Tensor& out);
// The whole stack dequantised, w.shape in `dtype`.
Tensor nf4_stack_dequantize(const Nf4Stack& w, DType dtype);
// Quantises piece p of the stack from w_piece (the piece's shape): its rows of the state and its offset.
void nf4_stack_quantize_piece(const Tensor& w_piece, Nf4Stack& w, int64_t p);

}  // namespace lt
