// LoRA (Hu et al. 2021, as PEFT implements it): a frozen linear layer y = base(x) plus a trainable
// low-rank update (dropout(x) A^T) B^T * (alpha / r), A [r, in] Kaiming-uniform (PEFT's
// kaiming_uniform_(a=sqrt(5)): uniform(-1/sqrt(in), 1/sqrt(in))), B [out, r] zero, so a fresh
// adapter leaves the model's output unchanged.
//
// Names: the wrapper takes the base's place (Module::replace_module) and lists the base's
// parameters, buffers and children as its own, under the same names, so the base keeps its
// Hugging Face name ("q_proj.weight") and model files load and save as before; the adapters are
// "q_proj.lora_A.weight" and "q_proj.lora_B.weight", PEFT's names without its adapter name.
// The base is shared, not copied: a load into "q_proj.weight" writes the base's tensor. A feature
// that swaps a parameter's tensor through Module::named_parameter_slots() must do it before LoRA
// is installed (docs/decisions.md, "LoRA").
#pragma once
#include <memory>
#include <optional>

#include "leantrain/nn.h"
#include "leantrain/ops_lora.h"

namespace lt::nn {

struct LoraOptions {
  int64_t rank = 8;
  double alpha = 8;    // the update is scaled by alpha / rank
  double dropout = 0;  // on the adapter's input only (PEFT's lora_dropout)
};

// What LoRA needs to know of a module that computes y = x W^T + b: its features, and the layout
// of its weight (Conv1D's [in, out] for GPT-2). nullopt: not a linear layer LoRA can wrap.
// nn::Linear (both layouts) is one; a quantised linear adds itself here.
struct LinearShape {
  int64_t in = 0, out = 0;
  WeightLayout layout = WeightLayout::OutIn;
};
std::optional<LinearShape> linear_shape(const Module& m);

class LoraLinear : public UnaryModule {
 public:
  // `base` must be a linear layer (linear_shape); its floating parameters are frozen. The adapters
  // are made by `pf` (its device and dtype; call pf.materialize() before the first forward).
  LoraLinear(std::shared_ptr<UnaryModule> base, const LoraOptions& o, ParamFactory& pf);
  const char* type_name() const override { return "LoraLinear"; }
  Tensor forward(const Tensor& x) override;  // base(x) + update(x)
  // The adapter's term alone, (dropout(x) A^T * alpha/r) B^T: lets a caller that computes several
  // bases in one GEMM (stacked weights) add the updates after it.
  Tensor update(const Tensor& x);
  // The adapter's factors for lora_linear (cast as a Linear casts its weight), or nothing when its
  // update must run as calls: LoRA dropout, or a wrapper installed on lora_A or lora_B.
  std::optional<LoraFactors> fused_factors() const;

  UnaryModule& base() const { return *base_; }
  std::shared_ptr<UnaryModule> base_ptr() const { return base_; }
  const LinearShape& shape() const { return shape_; }
  const LoraOptions& options() const { return opts_; }
  double scaling() const { return opts_.alpha / double(opts_.rank); }
  const Tensor& lora_A() const { return lora_A_->weight(); }  // [r, in]
  const Tensor& lora_B() const { return lora_B_->weight(); }  // [out, r]

 private:
  std::shared_ptr<UnaryModule> base_;
  LinearShape shape_;
  LoraOptions opts_;
  std::shared_ptr<Linear> lora_A_, lora_B_;
  std::shared_ptr<Dropout> dropout_;  // null when p == 0 (PEFT's nn.Identity)
};

// While one lives, every LoRA adapter computes its base alone, on this thread (PEFT's
// `with model.disable_adapter():`): the model is the frozen base it started from. A DPO run's
// reference forward is this, under inference mode, so the reference costs no second model.
class AdaptersOffScope {
 public:
  AdaptersOffScope();
  ~AdaptersOffScope();
  AdaptersOffScope(const AdaptersOffScope&) = delete;
  AdaptersOffScope& operator=(const AdaptersOffScope&) = delete;

 private:
  bool prev_;
};
bool adapters_off();

// The merged weight W + (alpha / r) B A of `m`'s base, in the base weight's layout and dtype
// (computed in f32). The base must be an nn::Linear.
Tensor lora_merged_weight(const LoraLinear& m);

}  // namespace lt::nn
