// Self-attention over a fused [B, T, (H + 2 Hkv) D] projection, in the pieces that
// self_attention_packed (attention.cpp) and attention_linear (recompute_linear.cpp) share: the
// checks, the forward into given buffers, the backward into a dqkv buffer.
#pragma once
#include "ops/op_common.h"

namespace lt::detail {

struct PackedAttention {
  Device dev;
  Tensor qkv, mask, doc_pos;  // checked and contiguous (mask, doc_pos undefined when none)
  int64_t B = 0, T = 0, H = 0, Hkv = 0, D = 0, C = 0, window = 0;
  bool causal = false;
  float scale = 1;

  Tensor heads_view(const Tensor& x, int64_t heads, int64_t col) const;  // [B, heads, T, D], not recorded
  Tensor q_of(const Tensor& x) const { return heads_view(x, H, 0); }
  Tensor k_of(const Tensor& x) const { return heads_view(x, Hkv, C); }
  Tensor v_of(const Tensor& x) const { return heads_view(x, Hkv, C + Hkv * D); }
  // out [B, T, C] and lse [B, H, T] of attention over qkv_now (laid out like qkv).
  void forward(const Tensor& out, const Tensor& lse, const Tensor& qkv_now, const Tensor& mask_now,
               const Tensor& doc_now) const;
  // dqkv from the output's gradient g [B, T, C] (a fresh buffer of qkv_now's shape).
  Tensor backward(const Tensor& g, const Tensor& qkv_now, const Tensor& out, const Tensor& lse,
                  const Tensor& mask_now, const Tensor& doc_now) const;
};

PackedAttention prepare_packed_attention(const char* name, const Tensor& qkv, int64_t heads, int64_t kv_heads,
                                         const AttentionMask& mask, double scale);

// Checks AttentionMask's window and doc_pos against B, Tq, Tk (key_padding is checked apart);
// returns doc_pos contiguous, or undefined. On the CPU it also checks that doc_pos restarts
// at 0 and counts up by one inside each document.
Tensor check_mask_kinds(const char* name, const AttentionMask& mask, int64_t B, int64_t Tq, int64_t Tk);

}  // namespace lt::detail
