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
#include <vector>

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

// Under autocast, every tensor of `params` (f32 views of one storage, a flat parameter store)
// cast to the compute dtype by ONE kernel over the store, where each autocast()/autocast_like()
// of a parameter would launch its own (GPT-2 124M: 149 launches a step, small ones mostly). Each
// cast is recorded on its own, so every gradient reaches its parameter as before. Until
// destroyed, autocast() and autocast_like() hand out these casts. Does nothing outside autocast
// or when the tensors are not f32 views of one storage. The casts live in one buffer that stays
// until the last of them is freed (the end of the backward): for a forward that keeps every
// weight for its backward anyway (no checkpointing), the same peak.
class AutocastPrecast {
 public:
  explicit AutocastPrecast(const std::vector<Tensor>& params);
  ~AutocastPrecast();
  AutocastPrecast(const AutocastPrecast&) = delete;
  AutocastPrecast& operator=(const AutocastPrecast&) = delete;
  bool active() const { return active_; }

 private:
  bool active_ = false;
  std::vector<Tensor> params_;  // whose casts it registered (active only)
};

namespace detail {
// A 16-bit copy handed out in a parameter's place by autocast() / autocast_like() (when the dtype
// asked for is the copy's) until unregistered: fsdp's gathered copies (dist/fsdp_units.h). The
// registrant records the copy as a cast of the parameter when gradients are wanted.
void register_precast(const Tensor& param, const Tensor& copy);
void unregister_precast(const Tensor& param);
// The registered copy of `param` in `dtype`, or nullptr.
const Tensor* precast_of(const Tensor& param, DType dtype);
// Whether any copy of `param` is registered (it may have no memory of its own then).
bool has_precast(const Tensor& param);

// Kept casts: 16-bit copies of f32 parameters that live between steps, kept current by whoever
// changes the parameter (the optimizer writes each one with its update: Optimizer::set_kept_casts,
// LEANTRAIN_KEEP_CASTS), so a forward casts nothing. While one is kept, autocast() hands out a view of it, recorded as a cast
// of the parameter when gradients are wanted (each call its own view and node, so checkpointed
// recomputations and every step work as with a fresh cast). A parameter autocast had to cast
// itself is marked wanted: the keeper keeps copies of those only.
// arm_kept_casts(true) while a keeper may keep casts (autocast looks them up and marks the
// parameters it casts as wanted), false when it stops; calls nest.
void arm_kept_casts(bool on);
void keep_cast(const Tensor& param, const Tensor& copy);
void drop_kept_cast(const Tensor& param);
bool cast_wanted(const Tensor& param);
bool has_kept_cast(const Tensor& param);
// The kept copies of all of `params` in `dtype` (views, not recorded: the caller records one cast
// of their stack), or an empty vector when a keeper is armed but some has none: each of them is
// then marked wanted (a stacked GEMM's q | k | v, gate | up), and the caller casts the stack.
std::vector<Tensor> kept_casts_of(const std::vector<Tensor>& params, DType dtype);
}  // namespace detail

// Under autocast, an f32 tensor cast (recorded) to the compute dtype; anything else unchanged.
Tensor autocast(const Tensor& t);
// Under autocast, `p` cast (recorded) to x's dtype when both are floating and differ (norm weights).
Tensor autocast_like(const Tensor& p, const Tensor& x);
// autocast() for a parameter that another op also reads in f32: a tied head's table, which the
// embedding looks up in f32. Its consumer's gradient then comes back through the cast (16-bit,
// widened by the cast's backward) instead of straight to the parameter in f32 (past_f32_cast):
// it waits there for the embedding's gradient, at half the bytes (GPT-2 124M: 77 MB).
Tensor autocast_tied(const Tensor& p);

}  // namespace lt
