// Autocast: the -mixed precision policies. Parameters stay f32; inside an AutocastGuard the
// layers of nn/ and models/ cast what they use to the compute dtype (bf16 or f16) at the point
// of use, with recorded casts, so the backward casts gradients back and every .grad is f32.
// The ops of ops.h never look at this: they compute in their inputs' dtype, as always.
//
// The rule the layers follow (docs/user-guide.md, "Precision"):
//   - Linear, attention projections, the patch embedding and the GPT-2 head cast their f32
//     input, weight and bias to the compute dtype: matmuls and attention run in 16-bit.
//   - Embedding lookups cast their output, so the residual stream is 16-bit from the start.
//   - Norms cast their f32 weights to their input's dtype. Their kernels (and softmax's and
//     cross-entropy's) keep statistics in f32 and take and return 16-bit tensors; the loss
//     comes out f32 (cross-entropy's per-row losses are f32 for any logits dtype).
#pragma once
#include <optional>

#include "leantrain/tensor.h"

namespace lt {

// The compute dtype while an AutocastGuard with a dtype is alive on this thread; nullopt otherwise.
std::optional<DType> autocast_dtype();

// Turns autocast on with `dtype` (f16 or bf16), or off with nullopt, until destroyed.
class AutocastGuard {
 public:
  explicit AutocastGuard(std::optional<DType> dtype);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  std::optional<DType> prev_;
};

// Under autocast, an f32 tensor cast (recorded) to the compute dtype; anything else unchanged.
Tensor autocast(const Tensor& t);
// Under autocast, `p` cast (recorded) to x's dtype when both are floating and differ (norm weights).
Tensor autocast_like(const Tensor& p, const Tensor& x);

}  // namespace lt
