// Quantised layers: a frozen NF4 base linear (bitsandbytes' Linear4bit), the module that
// `--quantize nf4` puts in place of every linear layer of a model's blocks. It is a UnaryModule
// computing x W^T + b, so a wrapper (LoRA) can go around it through Module::replace_module.
//
// Its state lives in the parameter store as buffers (never trainable; checkpoints, plans and the
// memory table see them), named after bitsandbytes' Hugging Face tensors where a name can be
// ('.' is reserved for paths):
//   weight                u8  [(n + 1) / 2, 1]   packed codes, first element high   ("weight")
//   weight_absmax         u8  [ceil(n / 64)]      8-bit block absmax                 ("weight.absmax")
//   weight_nested_absmax  f32 [ceil(blocks/256)]                                      ("weight.nested_absmax")
// The rest of bitsandbytes' state is small and kept on the host: the 256-entry nested map, the
// offset and the original dtype; the NF4 map is fixed. quant/nf4_checkpoint.h writes and reads
// the six tensors bitsandbytes saves ("weight.quant_map", "weight.nested_quant_map",
// "weight.quant_state.bitsandbytes__nf4" are produced at save time and consumed at load).
#pragma once
#include <memory>

#include "leantrain/nn.h"
#include "quant/nf4.h"

namespace lt::nn {

class Nf4Linear : public UnaryModule {
 public:
  // `q`: an [out, in] weight's NF4 state whose tensors become the module's buffers (views of a
  // store, or tensors of their own); `bias` [out] or undefined (16-bit, may train).
  Nf4Linear(Nf4Weight q, Tensor bias);
  const char* type_name() const override { return "Linear4bit"; }
  // nf4_linear under autocast, as Linear::forward: the weight is dequantised to the input's dtype.
  Tensor forward(const Tensor& x) override;
  // The state with the module's current buffers (after a load or a slot swap).
  Nf4Weight state() const;
  // Sets what bitsandbytes keeps outside the buffers (a load): offset, nested map, dtype.
  void set_host_state(float offset, std::vector<float> nested_map, DType dtype);
  Tensor bias() const { return bias_ ? *bias_ : Tensor(); }
  int64_t in_features() const { return q_.shape[1]; }
  int64_t out_features() const { return q_.shape[0]; }

 private:
  Nf4Weight q_;  // host parts; the tensors are read from the buffer slots
  Tensor* codes_ = nullptr;
  Tensor* absmax_ = nullptr;
  Tensor* nested_absmax_ = nullptr;
  Tensor* bias_ = nullptr;
};

}  // namespace lt::nn
