// Sparse mixture-of-experts blocks as transformers 5 builds them (Qwen3MoeSparseMoeBlock,
// MixtralSparseMoeBlock): a router "gate" (weight [E, C], no bias) and "experts" holding every
// expert's weights stacked, gate_up_proj [E, 2I, C] (gate rows first, then up) and down_proj
// [E, C, I]. Checkpoints on the hub name each expert apart; models/ maps both layouts.
//
// Forward over N tokens: router logits, softmax and top-k (moe_route), the routed slots sorted by
// expert (moe_dispatch), each slot's token row gathered, the experts' SwiGLU MLPs as grouped GEMMs
// over the sorted rows, and the rows weighted and summed back per token (moe_combine).
//
// LoRA on the experts (add_lora) keeps PEFT's layout for target_parameters: per projection a
// lora_A of [E r, out] and a lora_B applied first; gate_up_proj's adapter sits under
// "base_layer" (PEFT wraps it first), down_proj's on the experts module itself. B A is never
// formed: each adapter is two more grouped GEMMs of rank r around the base's.
//
// NF4 experts (--quantize nf4, QLoRA): the stacked weights as NF4 stacks (quant/nf4.h, Nf4Stack:
// each expert's gate_proj, up_proj and down_proj a bitsandbytes state of its own), frozen, their
// state tensors buffers named after the weights (gate_up_proj, gate_up_proj_absmax,
// gate_up_proj_nested_absmax; down_proj likewise). The grouped GEMMs dequantise a group of
// experts at a time into a transient buffer (grouped_linear_nf4); adapters go around them as on
// 16-bit experts.
#pragma once
#include <memory>

#include "leantrain/nn.h"
#include "leantrain/ops_moe.h"
#include "quant/nf4.h"

namespace lt::nn {

struct MoeOptions {
  int64_t hidden = 0, intermediate = 0, experts = 0, top_k = 0;
  bool renorm = true;           // norm_topk_prob (Mixtral: always)
  bool round_weights = true;    // router weights in the logits' dtype (Qwen3-MoE) or f32 (Mixtral)
  Init init = Init::normal(0.02);
  const char* type = "Qwen3MoeSparseMoeBlock";
  const char* experts_type = "Qwen3MoeExperts";
  const char* router_type = "Qwen3MoeTopKRouter";
};

// transformers' *TopKRouter: one weight [E, C] (parameter "weight").
class MoeRouter : public Module {
 public:
  MoeRouter(ParamFactory& pf, const MoeOptions& o);
  const char* type_name() const override { return type_; }
  Tensor& weight() const { return *weight_; }

 private:
  const char* type_;
  Tensor* weight_ = nullptr;
};

// One low-rank adapter on a stacked expert weight [E, d1, d2] (used as x @ w_e^T): lora_A [E r, d1]
// (PEFT's tensor), lora_B [E, r, d2] (PEFT's [d2, r E] transposed per expert, so that each
// expert's factor is contiguous for the grouped GEMM).
class MoeLoraAdapter : public Module {
 public:
  MoeLoraAdapter(ParamFactory& pf, int64_t experts, int64_t d1, int64_t d2, int64_t rank, double alpha);
  const char* type_name() const override { return "ParamWrapper"; }
  Tensor& lora_A() const { return *a_; }
  Tensor& lora_B() const { return *b_; }
  int64_t rank() const { return rank_; }
  double scaling() const { return alpha_ / double(rank_); }
  // The factors as grouped_lora_linear takes them (the compute dtype under autocast): B [E, r, d2]
  // first, then A viewed as [E, r, d1]; the term for rows xs [R, d2] is ((xs B_e^T) * s) A_e.
  Tensor factor_in() const;
  Tensor factor_out() const;
  // delta [E, d1, d2] = s A_e^T B_e in f32 (the merged weight's increment).
  Tensor delta() const;

 private:
  Tensor *a_ = nullptr, *b_ = nullptr;
  int64_t experts_, rank_;
  double alpha_;
};

class MoeExperts : public Module {
 public:
  MoeExperts(ParamFactory& pf, const MoeOptions& o);
  // NF4 experts of type `type` from two stacks: gate_up [E, 2I, C] in 2 parts (gate_proj,
  // up_proj), down [E, C, I] in 1; their tensors become the module's buffers (views of a store,
  // or tensors of their own).
  MoeExperts(const char* type, Nf4Stack gate_up, Nf4Stack down);
  const char* type_name() const override { return type_; }
  bool quantized() const { return gate_up_nf4_.codes != nullptr; }
  // The 16-bit stacked weights (not on NF4 experts).
  Tensor& gate_up_proj() const;
  Tensor& down_proj() const;
  // NF4 experts: the stacks with the module's current buffers (after a load or a slot swap).
  Nf4Stack gate_up_nf4() const { return gate_up_nf4_.stack(); }
  Nf4Stack down_nf4() const { return down_nf4_.stack(); }
  // Sets what a stack keeps outside the buffers (a load, a quantisation): offsets, nested map, dtype.
  void set_nf4_host_state(bool gate_up, std::vector<float> offsets, std::vector<float> nested_map, DType dtype);
  int64_t num_experts() const { return gate_up_shape()[0]; }
  int64_t intermediate() const { return down_shape()[2]; }
  int64_t hidden() const { return gate_up_shape()[2]; }
  // Adds adapters on gate_up_proj and down_proj (PEFT's names: "base_layer.lora_{A,B}.weight" and
  // "lora_{A,B}.weight"), freezing the expert weights. pf makes them (materialize it after).
  void add_lora(ParamFactory& pf, int64_t rank, double alpha);
  // Folds the adapters into the expert weights (W_e + s A_e^T B_e, in f32, rounded once to the
  // weights' dtype); the forward stops applying them (their parameters stay listed, unused, and
  // are left out of the model's checkpoint). Refused on NF4 experts (rounding would lose them).
  void merge_lora();
  MoeLoraAdapter* gate_up_lora() const { return gate_up_lora_.get(); }
  MoeLoraAdapter* down_lora() const { return down_lora_.get(); }
  // The experts' MLP over the gathered rows xs [R, C] -> [R, C].
  Tensor run(const Tensor& xs, const MoeDispatch& d);

 private:
  // An NF4 stack's buffers (slots of this module) and its host state.
  struct Nf4Slots {
    Tensor *codes = nullptr, *absmax = nullptr, *nested = nullptr;
    Nf4Stack host;  // shape, parts, dtype, offsets, nested map (its tensors unset)
    Nf4Stack stack() const;
  };
  Nf4Slots register_nf4(const std::string& name, Nf4Stack s);
  Shape gate_up_shape() const { return gate_up_ ? gate_up_->shape() : gate_up_nf4_.host.shape; }
  Shape down_shape() const { return down_ ? down_->shape() : down_nf4_.host.shape; }

  const char* type_;
  Tensor *gate_up_ = nullptr, *down_ = nullptr;
  Nf4Slots gate_up_nf4_, down_nf4_;
  std::shared_ptr<MoeLoraAdapter> gate_up_lora_, down_lora_;
};

class SparseMoeBlock : public UnaryModule {
 public:
  SparseMoeBlock(ParamFactory& pf, const MoeOptions& o);
  const char* type_name() const override { return opts_.type; }
  Tensor forward(const Tensor& x) override;  // [..., C] -> [..., C]
  const MoeOptions& options() const { return opts_; }
  MoeRouter& gate() const { return *gate_; }
  MoeExperts& experts() const { return *experts_; }

 private:
  MoeOptions opts_;
  std::shared_ptr<MoeRouter> gate_;
  Child<MoeExperts> experts_;  // replace_module swaps in NF4 experts (train/quantize_setup.cpp)
};

}  // namespace lt::nn
