// NF4 quantisation front-end: allocates the state, runs the backend's quant ops in bitsandbytes'
// order (NF4 codes and f32 absmax; mean of the absmax; 8-bit codes of absmax - mean).
#include "quant/nf4.h"

#include "backend/backend.h"
#include "backend/moe_kernels.h"
#include "backend/nf4.h"
#include "leantrain/error.h"
#include "leantrain/ops.h"
#include "quant/bnb_dynamic_map.h"

namespace lt {

namespace {

float mean_of(const Tensor& absmax) {
  if (absmax.device().is_meta() || absmax.numel() == 0) return 0.0f;
  const Tensor host = absmax.device().is_cpu() ? absmax : to_device(absmax, Device::cpu());
  const float* a = host.data<float>();
  double sum = 0;
  for (int64_t i = 0; i < host.numel(); ++i) sum += a[i];
  return float(sum / double(host.numel()));
}

}  // namespace

namespace {

void check_quantizable(const Tensor& w) {
  LT_CHECK(w.dtype() == DType::F32 || w.dtype() == DType::F16 || w.dtype() == DType::BF16,
           std::string("nf4 quantize: the weight is ") + dtype_name(w.dtype()), "NF4 quantises f32, f16 or bf16 weights",
           "cast the weight to bf16 first");
}

}  // namespace

void nf4_quantize_into(const Tensor& w, Nf4Weight& q, std::span<const float> nested_map) {
  check_quantizable(w);
  const Tensor x = contiguous(w);
  const Device dev = x.device();
  const int64_t n = x.numel();
  const int64_t blocks = nf4_blocks(n);
  LT_CHECK(q.codes.numel() == nf4_bytes(n) && q.absmax_codes.numel() == blocks &&
               q.nested_absmax.numel() == nf4_nested_blocks(blocks) && q.codes.device() == dev,
           "nf4 quantize: a state of " + std::to_string(q.codes.numel()) + " code bytes for " + std::to_string(n) +
               " values",
           "the state must be sized for the weight, on its device", "allocate it with nf4_bytes / nf4_blocks");
  const std::span<const float> map = nested_map.empty() ? bnb_dynamic_map_signed() : nested_map;
  LT_CHECK(map.size() == 256, "nf4 quantize: the nested map has " + std::to_string(map.size()) + " entries",
           "an 8-bit map has 256", "pass bitsandbytes' signed dynamic map");
  Backend& be = backend_for(dev);
  q.shape = w.shape();
  q.dtype = w.dtype();
  const Tensor absmax = empty({blocks}, DType::F32, dev);
  be.nf4_quantize(reshape(q.codes, {nf4_bytes(n)}), absmax, reshape(x, {n}));
  q.offset = mean_of(absmax);
  q.nested_map.assign(map.begin(), map.end());
  be.q8_blockwise_quantize(reshape(q.absmax_codes, {blocks}), reshape(q.nested_absmax, {nf4_nested_blocks(blocks)}),
                           absmax, q.offset, map);
}

Nf4Weight nf4_quantize(const Tensor& w, std::span<const float> nested_map) {
  check_quantizable(w);
  const Device dev = w.device();
  const int64_t n = w.numel();
  const int64_t blocks = nf4_blocks(n);
  Nf4Weight q;
  q.codes = empty({nf4_bytes(n)}, DType::U8, dev);
  q.absmax_codes = empty({blocks}, DType::U8, dev);
  q.nested_absmax = empty({nf4_nested_blocks(blocks)}, DType::F32, dev);
  nf4_quantize_into(w, q, nested_map);
  return q;
}

Tensor nf4_block_absmax(const Nf4Weight& q) {
  LT_CHECK(q.nested_map.size() == 256, "nf4: the nested quant map has " + std::to_string(q.nested_map.size()) + " entries",
           "an 8-bit map has 256", "load weight.nested_quant_map with the weight");
  const Tensor absmax = empty({q.absmax_codes.numel()}, DType::F32, q.codes.device());
  backend_for(q.codes.device()).q8_blockwise_dequantize(absmax, q.absmax_codes, q.nested_absmax, q.offset, q.nested_map);
  return absmax;
}

Tensor nf4_dequantize(const Nf4Weight& q, DType dtype) {
  LT_CHECK(q.nested_map.size() == 256, "nf4: the nested quant map has " + std::to_string(q.nested_map.size()) + " entries",
           "an 8-bit map has 256", "load weight.nested_quant_map with the weight");
  // One pass, the absmax decoded on the fly: no f32 absmax tensor (the same bits as
  // nf4_block_absmax followed by the backend's nf4_dequantize).
  const Tensor out = empty(q.shape, dtype, q.codes.device());
  backend_for(q.codes.device())
      .nf4_dequantize_nested(reshape(out, {out.numel()}), reshape(q.codes, {q.codes.numel()}),
                             reshape(q.absmax_codes, {q.absmax_codes.numel()}),
                             reshape(q.nested_absmax, {q.nested_absmax.numel()}), q.offset, q.nested_map);
  return out;
}

namespace {

// Row p of a [pieces, m] state tensor, as a flat [m] view.
Tensor state_row(const Tensor& t, int64_t p) { return make_view(t, {t.size(1)}, {1}, t.offset() + p * t.strides()[0]); }

}  // namespace

Nf4StackShapes nf4_stack_shapes(const Shape& shape, int64_t parts) {
  LT_CHECK(shape.size() == 3 && parts >= 1 && shape[1] % parts == 0,
           "NF4 experts: a stacked weight of shape " + shape_str(shape) + " in " + std::to_string(parts) + " parts",
           "a stack is [experts, d1, d2] with d1 a multiple of the parts", "quantise the experts' stacked weights");
  const int64_t pieces = shape[0] * parts, n = shape[1] / parts * shape[2], blocks = nf4_blocks(n);
  return {{pieces, nf4_bytes(n)}, {pieces, blocks}, {pieces, nf4_nested_blocks(blocks)}};
}

Nf4Weight Nf4Stack::piece(int64_t p) const {
  LT_ASSERT(p >= 0 && p < pieces() && int64_t(offsets.size()) == pieces());
  Nf4Weight q;
  q.shape = piece_shape();
  q.dtype = dtype;
  q.codes = state_row(codes, p);
  q.absmax_codes = state_row(absmax_codes, p);
  q.nested_absmax = state_row(nested_absmax, p);
  q.offset = offsets[size_t(p)];
  q.nested_map = nested_map;
  return q;
}

void nf4_stack_dequantize_into(const Nf4Stack& w, int64_t e0, int64_t count, const Tensor& out) {
  LT_CHECK(e0 >= 0 && count >= 0 && e0 + count <= w.experts() && out.is_contiguous() &&
               out.shape() == Shape({count, w.shape[1], w.shape[2]}),
           "NF4 experts: experts [" + std::to_string(e0) + ", " + std::to_string(e0 + count) + ") into " + shape_str(out.shape()),
           "the stack has " + std::to_string(w.experts()) + " of " + shape_str({w.shape[1], w.shape[2]}),
           "pass a contiguous [count, d1, d2] output");
  LT_CHECK(w.nested_map.size() == 256 && int64_t(w.offsets.size()) == w.pieces(),
           "NF4 experts: a nested map of " + std::to_string(w.nested_map.size()) + " and " + std::to_string(w.offsets.size()) +
               " offsets",
           "a stack has 256 map entries and one offset per piece", "quantise or load the stack first");
  if (count == 0) return;
  const int64_t p0 = e0 * w.parts, np = count * w.parts;
  auto rows = [&](const Tensor& t) {
    return make_view(t, {np, t.size(1)}, {t.strides()[0], 1}, t.offset() + p0 * t.strides()[0]);
  };
  moe_kernels_for(out.device())
      .nf4_dequantize_pieces(make_view(out, {np, w.piece_numel()}, {w.piece_numel(), 1}, out.offset()), rows(w.codes),
                             rows(w.absmax_codes), rows(w.nested_absmax),
                             std::span<const float>(w.offsets).subspan(size_t(p0), size_t(np)), w.nested_map);
}

Tensor nf4_stack_dequantize(const Nf4Stack& w, DType dtype) {
  const Tensor out = empty(w.shape, dtype, w.codes.device());
  nf4_stack_dequantize_into(w, 0, w.experts(), out);
  return out;
}

void nf4_stack_quantize_piece(const Tensor& w_piece, Nf4Stack& w, int64_t p) {
  LT_CHECK(p >= 0 && p < w.pieces() && w_piece.shape() == w.piece_shape(),
           "NF4 experts: piece " + std::to_string(p) + " of shape " + shape_str(w_piece.shape()),
           "the stack has " + std::to_string(w.pieces()) + " pieces of " + shape_str(w.piece_shape()),
           "quantise each expert's projection apart");
  if (int64_t(w.offsets.size()) != w.pieces()) w.offsets.assign(size_t(w.pieces()), 0.0f);
  Nf4Weight q = w.piece(p);
  nf4_quantize_into(w_piece, q, w.nested_map);
  w.offsets[size_t(p)] = q.offset;
  w.nested_map = q.nested_map;
  w.dtype = q.dtype;
}

}  // namespace lt
