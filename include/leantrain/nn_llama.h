// The layers of LLaMA-family decoders (transformers' LlamaForCausalLM, Qwen2ForCausalLM,
// MistralForCausalLM): rotary position embedding, grouped-query self-attention with separate
// q/k/v/o projections, and the gated (SwiGLU) MLP, with transformers' child and parameter names.
//
// The projections keep transformers' names (q_proj, k_proj, v_proj; gate_proj, up_proj) but run
// as one GEMM each: the layers make the weights one after another, so the parameter store places
// them back to back, and stacked_rows() hands the GEMM one [sum of out, in] view of them. Only
// the rotated q | k | v buffer and the attention output (attention, o_proj) and the gate | up
// buffer (SwiGLU and down_proj) are kept for the backward, besides the projections' inputs.
#pragma once
#include <memory>
#include <vector>

#include "leantrain/nn.h"

namespace lt::nn {

// ws (all [n_i, ...] with equal trailing dims, one dtype and device) as one tensor along dim 0
// without a copy when they lie back to back in one storage (the parameter store places tensors
// made one after another so whenever each one's bytes are a multiple of its 512-byte granule),
// else concatenated. Recorded: the backward gives each tensor its rows of the gradient.
Tensor stacked_rows(const std::vector<Tensor>& ws);
// The stack of `copies`, 16-bit copies of the f32 `params` (fsdp's gathered copies: the params may
// have no memory), recorded as one cast of the params' stack: the GEMM that reads it gives the
// params f32 gradients (past_f32_cast), as autocast(stacked_rows(params)) would.
Tensor stacked_copies(const std::vector<Tensor>& copies, const std::vector<Tensor>& params);

// One GEMM over the Linears' stacked weights (and biases), plus the LoRA updates when every child
// is an adapter on a plain Linear; an undefined tensor when some child is neither, only some are
// adapters, or some have a bias and others not (the caller then calls the modules). Used for
// q | k | v and gate | up, whose Linears are made one after another.
Tensor fused_linear(const Tensor& x, const std::vector<const Child<UnaryModule>*>& children);

// transformers' LlamaRotaryEmbedding (model.rotary_emb): the inverse frequencies (f32, scaling
// applied, as transformers computes them) that every attention layer of the model shares, and
// the position of the first token of the forward being run. No parameters, nothing saved.
class RotaryEmbedding : public Module {
 public:
  RotaryEmbedding(std::vector<float> inv_freq, const char* type) : inv_freq_(std::move(inv_freq)), type_(type) {}
  const char* type_name() const override { return type_; }
  const std::vector<float>& inv_freq() const { return inv_freq_; }
  int64_t head_dim() const { return 2 * int64_t(inv_freq_.size()); }
  // Position of token 0 of the current forward (0 but for a cached decoding step); the model
  // sets it around its layers.
  int64_t pos_offset() const { return pos_offset_; }
  void set_pos_offset(int64_t p) { pos_offset_ = p; }

 private:
  std::vector<float> inv_freq_;
  const char* type_;
  int64_t pos_offset_ = 0;
};

struct DecoderAttentionOptions {
  int64_t hidden = 0, heads = 0, kv_heads = 0, head_dim = 0;
  bool qkv_bias = false, o_bias = false;  // Llama: attention_bias for both; Qwen2: q, k, v only
  // Qwen3: q_norm and k_norm, RMSNorms of width head_dim (eps qk_norm_eps) over each query and key
  // head before RoPE.
  bool qk_norm = false;
  double qk_norm_eps = 1e-6;
  bool unit_offset_norms = false;  // Gemma: q_norm / k_norm scale by (1 + w)
  double scale = 0.0;              // attention scale; <= 0: 1 / sqrt(head_dim)
  // Sliding-window attention: each query sees the `window` latest keys, itself included
  // (transformers' sliding_window); 0: full causal attention.
  int64_t window = 0;
  // Qwen3.5's attn_output_gate: q_proj is [2 H D, C], each head's D query rows followed by D gate
  // rows; the attention's output is multiplied by sigmoid(gate) before o_proj.
  bool output_gate = false;
  Init init = Init::normal(0.02);
  const char* type = "LlamaAttention";
};

// Grouped-query causal self-attention: q_proj [H D, C], k_proj and v_proj [Hkv D, C], o_proj
// [C, H D] (torch layout), RoPE on q and k, attention core (child "core", no parameters).
// Forward: qkv = x [q | k | v]^T (one GEMM), (qk_norm: q and k heads normalised), rotated in one
// op (v passes through), attended, o_proj. A rotary embedding narrower than the head dim turns
// the first dims of each head only (partial_rotary_factor); output_gate gates the attention's
// output (see DecoderAttentionOptions).
class DecoderSelfAttention : public SelfAttention {
 public:
  DecoderSelfAttention(ParamFactory& pf, const DecoderAttentionOptions& o, std::shared_ptr<RotaryEmbedding> rope);
  const char* type_name() const override { return type_; }
  Tensor forward(const Tensor& x, const TokenMask& mask) override;
  int64_t kv_heads() const { return kv_heads_; }

 private:
  Tensor project(const Tensor& x);  // [B, T, C] -> [B, T, (H + 2 Hkv) D] (H of 2 D with output_gate)
  Tensor norm_heads(const Tensor& qkv);  // q_norm, k_norm over their heads of qkv; v unchanged
  int64_t kv_heads_, head_dim_;
  bool output_gate_ = false;
  const char* type_;
  std::shared_ptr<RotaryEmbedding> rope_;
  Child<UnaryModule> q_proj_, k_proj_, v_proj_, o_proj_;
  Child<UnaryModule> q_norm_, k_norm_;  // qk_norm only
};

struct GatedMlpOptions {
  int64_t hidden = 0, intermediate = 0;
  bool bias = false;
  GateAct act = GateAct::Silu;  // GeluTanh: Gemma's GeGLU (gelu_pytorch_tanh)
  Init init = Init::normal(0.02);
  const char* type = "LlamaMLP";
};

// transformers' LlamaMLP: down_proj(silu(gate_proj(x)) * up_proj(x)), the gate | up GEMM as one
// and silu * up with down_proj as one op (swiglu_linear), which keeps only the gate | up buffer
// (the activation is recomputed in the backward).
class GatedMlp : public UnaryModule {
 public:
  GatedMlp(ParamFactory& pf, const GatedMlpOptions& o);
  const char* type_name() const override { return type_; }
  Tensor forward(const Tensor& x) override;
  // The forward when nothing reads its output (a checkpointed block's recomputation, Note
  // [Unread region output]): the same graph and allocations, the gate | up product computed (the
  // backward reads it), the SwiGLU and down_proj product run dry. Undefined when down_proj is not
  // a plain linear (LoRA, quantized: their intermediates are read); call forward then.
  Tensor forward_unread_output(const Tensor& x);

 private:
  Tensor forward_impl(const Tensor& x, bool unread_output);
  const char* type_;
  GateAct act_;
  Child<UnaryModule> gate_proj_, up_proj_, down_proj_;
};

}  // namespace lt::nn
