// What linear (matmul.cpp) and the linears that recompute their input (recompute_linear.cpp)
// share: the checked operands, the GEMM descriptor and the plain linear's backward.
#pragma once
#include <optional>

#include "ops/op_common.h"

namespace lt::detail {

// A linear's operands, checked, in the layouts its GEMM reads.
struct LinearArgs {
  Device dev;
  Tensor xc, wc;
  int64_t in = 0, outf = 0, rows = 0;
  Shape out_shape;
  GemmDesc desc(int64_t ldc) const;  // x @ W (+ b) as one GEMM, the output in rows of ldc
};

LinearArgs prepare_linear(const Tensor& x, const Tensor& w, const Tensor& bias, bool weight_in_out);
// Records out's backward: dX = dY W^T, dW, db = column sums of dY (each only when needed).
void record_linear(Tensor& out, const LinearArgs& a, const Tensor& bias, bool weight_in_out, const Shape& xs);
// False when LEANTRAIN_GEMM_GELU=0 sends the tanh GELU out of the GEMM's epilogue.
bool gemm_gelu_enabled();
// The fused path of linear_gelu_parts for prepared operands (a.xc the input rows, outf a
// multiple of 8): pre = a.xc @ W + bias and act = gelu_tanh(pre) from one GEMM's epilogue, pre
// kept for (and handed back by) a selective checkpoint's recomputation. Records no graph.
LinearGelu linear_gelu_gemm(const LinearArgs& a, const Tensor& bias, bool weight_in_out);
// A linear's weight and bias gradients from its output's gradient g2 [rows, out] and its input
// x2 [rows, in] (either undefined when not needed): dW = x2^T g2 ([in, out] weights) or g2^T x2
// ([out, in]), db = the column sums of g2. Both at once (contiguous operands of one dtype) go
// through gemm_bgrad, one GEMM with the bias gradient in its epilogue; LEANTRAIN_GEMM_BGRAD=0
// sends them back to matmul then sum_to (to time one against the other).
// Both come out in `dtype`: g2's, or f32 for 16-bit operands (param_grad_targets), summed in f32
// by the GEMM and never rounded to 16 bits.
struct WeightBiasGrad {
  Tensor w, b;
};
WeightBiasGrad weight_bias_grad(const Tensor& g2, const Tensor& x2, bool weight_in_out, bool need_w, bool need_b,
                                std::optional<DType> dtype = std::nullopt);

}  // namespace lt::detail
