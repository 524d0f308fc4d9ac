// A linear layer and its LoRA adapters as one op (ops/lora_linear.cpp): the adapters' products
// added into the base GEMM's output by their own GEMMs' epilogues (beta = 1), and in the backward
// the input's gradient taking each adapter's term the same way. Composed from linear, scale,
// concat and add (what LoraLinear and the stacked q | k | v did first), each adapted layer formed
// an [rows, out] update, a concatenation and a sum in the forward, and the engine summed one
// [rows, in] gradient per adapter in the backward.
#pragma once
#include <vector>

#include "leantrain/ops.h"

namespace lt {

// One adapter on a block of the output's columns: (x a^T * scaling) b^T, a [r, in], b [out_i, r].
struct LoraFactors {
  Tensor a, b;
  double scaling = 1.0;
};

// y = x W^T (+ bias) with adapter i's term added to columns [c_i, c_i + out_i), the adapters
// covering the output in order (c_0 = 0, the out_i summing to W's rows): one adapter for a whole
// layer, or one per projection of a stacked weight (q | k | v). W [out, in] (torch layout); every
// operand x's dtype. The result is linear's (its padded rows for wide odd outputs); each adapter
// term is rounded into it once. Inside a selective checkpoint's recording or replay (kept matmul
// outputs) it runs as the composition, whose linears the replay hands back.
Tensor lora_linear(const Tensor& x, const Tensor& w, const Tensor& bias, const std::vector<LoraFactors>& adapters);

}  // namespace lt
