// Self-attention over a fused [B, T, (H + 2 Hkv) D] projection, in the pieces that
// self_attention_packed (attention.cpp) and attention_linear (recompute_linear.cpp) share: the
// checks, the forward into given buffers, the backward into a dqkv buffer.
#pragma once
#include <initializer_list>

#include "ops/op_common.h"

namespace lt::detail {

// Where a dense attention call runs (--attention-kernel, leantrain/ops.h): cudnn routes it to the
// backend's attention_*_cudnn ops, whose backward takes a workspace tensor; strict when the user
// asked for cuDNN for every call (a failure to run it is then an error, not leantrain's kernels).
struct AttentionRoute {
  bool cudnn = false;
  bool strict = false;
};
// The route of one call, from the setting, the device kind, dtype, shapes, masks and the operands'
// alignment only: the same answer on cuda and on a meta that simulates it. Under cudnn a call
// cuDNN cannot take throws a UsageError naming why.
AttentionRoute route_attention(const char* op, Device dev, DType dt, int64_t Tq, int64_t Tk, int64_t D, bool causal,
                               bool padded, int64_t window, bool docs, std::initializer_list<const Tensor*> operands);
// The backward's workspace for a cuDNN-routed call (u8, category workspace).
Tensor cudnn_attention_workspace(int64_t B, int64_t H, int64_t Hkv, int64_t Tq, int64_t Tk, int64_t D, Device dev);

struct PackedAttention {
  Device dev;
  Tensor qkv, mask, doc_pos;  // checked and contiguous (mask, doc_pos undefined when none)
  int64_t B = 0, T = 0, H = 0, Hkv = 0, D = 0, C = 0, window = 0;
  bool causal = false;
  float scale = 1;
  AttentionRoute route;

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
