// Gated DeltaNet, Qwen3.5's linear attention (transformers' Qwen3_5GatedDeltaNet), with
// transformers' child and parameter names: in_proj_qkv, in_proj_z, in_proj_b, in_proj_a (Linears,
// so LoRA, NF4 and checkpointing see them), conv1d (the short causal depthwise convolution,
// weight [conv_dim, 1, K]), dt_bias and A_log [value heads], norm (the gated RMSNorm, weight
// [value head dim]) and out_proj.
//
// Forward (x [B, T, hidden], padded positions zeroed first as transformers' mask does; packed
// documents (TokenMask::doc_pos) restart the convolution and the recurrent state at each start):
//   qkv = silu(conv1d(in_proj_qkv(x)))        q | k | v, Hk Dk + Hk Dk + Hv Dv wide
//   beta = sigmoid(in_proj_b(x)), g = -exp(A_log) softplus(in_proj_a(x) + dt_bias)
//   o = gated_delta_rule(q, k, v, g, beta)    by chunks of 64, state in f32
//   out = out_proj(norm(o, in_proj_z(x)))     the norm per value head, gated by silu(z)
// in_proj_b and in_proj_a run as one GEMM when both are plain Linears (or LoRA on plain Linears).
#pragma once
#include <memory>

#include "leantrain/nn.h"

namespace lt::nn {

// The short convolution: weight [channels, 1, K] (torch's depthwise Conv1d), causal, no bias,
// followed by SiLU. Type "Conv1d".
class CausalConv1d : public UnaryModule {
 public:
  CausalConv1d(ParamFactory& pf, int64_t channels, int64_t kernel, const Init& init);
  const char* type_name() const override { return "Conv1d"; }
  Tensor forward(const Tensor& x) override;  // [B, T, C] -> silu(conv(x)) [B, T, C]
  // Packed documents: doc_pos i32 [B, T] (undefined: one sequence a row), through the forward wrappers.
  using UnaryModule::operator();
  Tensor operator()(const Tensor& x, const Tensor& doc_pos) {
    return call_forward(x, [this, doc_pos](const Tensor& in) { return forward(in, doc_pos); });
  }
  Tensor forward(const Tensor& x, const Tensor& doc_pos);
  const Tensor& weight() const { return *weight_; }

 private:
  Tensor* weight_ = nullptr;
};

// transformers' Qwen3_5RMSNormGated: weight [D] (ones), over each group of D columns of x,
// multiplied by silu(z). Two inputs, so not a UnaryModule.
class GatedRMSNorm : public Module {
 public:
  GatedRMSNorm(ParamFactory& pf, int64_t dim, double eps);
  const char* type_name() const override { return "Qwen3_5RMSNormGated"; }
  Tensor operator()(const Tensor& x, const Tensor& z);

 private:
  double eps_;
  Tensor* weight_ = nullptr;
};

struct GatedDeltaNetOptions {
  int64_t hidden = 0, key_heads = 0, key_dim = 0, value_heads = 0, value_dim = 0, conv_kernel = 4;
  double norm_eps = 1e-6;
  int64_t chunk = 64;  // the delta rule's chunk (docs/decisions.md, "Gated DeltaNet by chunks")
  Init init = Init::normal(0.02);
  const char* type = "Qwen3_5GatedDeltaNet";
};

// A SelfAttention (the token mixer of a PreNormBlock) without an attention core: its FLOPs and
// memory are the delta rule's (docs/memory-model.md, "What a Gated DeltaNet layer saves").
class GatedDeltaNet : public SelfAttention {
 public:
  GatedDeltaNet(ParamFactory& pf, const GatedDeltaNetOptions& o);
  const char* type_name() const override { return type_; }
  // mask.key_padding: padded inputs enter as zeros, which leaves the real tokens exactly as without
  // the padding when, in each row (each document under doc_pos), the real tokens are one run
  // (padding before: the state and the convolution's window stay zero; after: it comes later);
  // check_padding refuses any other mask in one line. mask.doc_pos: packed documents, each alone.
  Tensor forward(const Tensor& x, const TokenMask& mask) override;
  const GatedDeltaNetOptions& options() const { return o_; }
  // The padding check (reads the mask on the host: a copy and a synchronisation on a GPU unless the
  // loader kept its bytes). forward runs it for CPU masks; a model runs it once a forward for others.
  static void check_padding(const TokenMask& mask);

 private:
  GatedDeltaNetOptions o_;
  const char* type_;
  Child<UnaryModule> in_proj_qkv_, in_proj_z_, in_proj_b_, in_proj_a_, out_proj_;
  Child<CausalConv1d> conv1d_;
  std::shared_ptr<GatedRMSNorm> norm_;
  Tensor* dt_bias_ = nullptr;
  Tensor* a_log_ = nullptr;
};

}  // namespace lt::nn
