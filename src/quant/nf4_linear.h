// The linear layer of a frozen NF4 weight (QLoRA's base projection): y = x W^T + bias with W
// dequantised into a workspace that lives only inside the op; the backward dequantises again.
#pragma once
#include "leantrain/tensor.h"
#include "quant/nf4.h"

namespace lt {

// x [..., in] (f32, f16 or bf16); w quantised from an [out, in] weight; bias [out] or undefined.
// Differentiable in x only: the weight is frozen and the bias must not require grad.
Tensor nf4_linear(const Tensor& x, const Nf4Weight& w, const Tensor& bias = Tensor());

}  // namespace lt
