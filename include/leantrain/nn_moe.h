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
#pragma once
#include <memory>

#include "leantrain/nn.h"
#include "leantrain/ops_moe.h"

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
  // The adapter's term for rows xs [R, d2] of the dispatch: ((xs B_e^T) * s) A_e -> [R, d1].
  Tensor update(const Tensor& xs, const MoeDispatch& d) const;
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
  const char* type_name() const override { return type_; }
  Tensor& gate_up_proj() const { return *gate_up_; }
  Tensor& down_proj() const { return *down_; }
  int64_t num_experts() const { return gate_up_->size(0); }
  int64_t intermediate() const { return down_->size(2); }
  // Adds adapters on gate_up_proj and down_proj (PEFT's names: "base_layer.lora_{A,B}.weight" and
  // "lora_{A,B}.weight"), freezing the expert weights. pf makes them (materialize it after).
  void add_lora(ParamFactory& pf, int64_t rank, double alpha);
  // Folds the adapters into the expert weights (W_e + s A_e^T B_e, in f32, rounded once to the
  // weights' dtype); the forward stops applying them (their parameters stay listed, unused, and
  // are left out of the model's checkpoint).
  void merge_lora();
  MoeLoraAdapter* gate_up_lora() const { return gate_up_lora_.get(); }
  MoeLoraAdapter* down_lora() const { return down_lora_.get(); }
  // The experts' MLP over the gathered rows xs [R, C] -> [R, C].
  Tensor run(const Tensor& xs, const MoeDispatch& d);

 private:
  const char* type_;
  Tensor *gate_up_ = nullptr, *down_ = nullptr;
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
  std::shared_ptr<MoeExperts> experts_;
};

}  // namespace lt::nn
