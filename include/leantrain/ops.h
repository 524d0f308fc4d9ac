// Differentiable ops. Each validates its inputs (clear lt::Error on a bad shape/dtype/device),
// allocates its outputs in the current memory category, dispatches to the backend of the
// inputs' device, and records an autograd node when grad mode is on and an input requires grad.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "leantrain/choices.h"
#include "leantrain/random.h"
#include "leantrain/tensor.h"

namespace lt {

// ---- creation (not recorded) ----
Tensor empty(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
Tensor zeros(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
Tensor ones(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
Tensor full(const Shape& shape, double value, DType dtype = DType::F32, Device device = Device::cpu());
// Host values converted to `dtype`.
Tensor from_vector(const std::vector<float>& v, const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
Tensor from_vector(const std::vector<double>& v, const Shape& shape, DType dtype = DType::F64, Device device = Device::cpu());
Tensor from_ints(const std::vector<int64_t>& v, const Shape& shape, DType dtype = DType::I64, Device device = Device::cpu());
// Counter-based random numbers drawn on the target device (no host copy).
Tensor randn(const Shape& shape, Generator& gen, float std = 1.0f, DType dtype = DType::F32, Device device = Device::cpu());
Tensor rand_uniform(const Shape& shape, Generator& gen, float lo, float hi, DType dtype = DType::F32, Device device = Device::cpu());
// In place, not recorded.
void fill_(const Tensor& t, double value);
void copy_(const Tensor& dst, const Tensor& src);  // same shape; casts dtype; crosses devices

// ---- shape and layout (views where possible) ----
Tensor reshape(const Tensor& x, const Shape& shape);  // one -1 allowed
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end);  // negative/clamped like Python
Tensor select(const Tensor& x, int64_t dim, int64_t index);             // drops `dim`
Tensor concat(const std::vector<Tensor>& xs, int64_t dim);
Tensor contiguous(const Tensor& x);
Tensor cast(const Tensor& x, DType dtype);
Tensor to_device(const Tensor& x, Device device);
Tensor expand(const Tensor& x, const Shape& shape);  // broadcast view (stride 0)
// [B, C, H, W] -> [B, (H/p)*(W/p), C*p*p], patches in row-major order, each flattened (c, i, j)
// exactly as a Conv2d(kernel=stride=p) weight [D, C, p, p] flattens.
Tensor patchify(const Tensor& images, int64_t patch);

// ---- elementwise (broadcasting like NumPy) ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor scale(const Tensor& x, double s);
Tensor add_scalar(const Tensor& x, double s);
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
// log(sigmoid(x)) (torch.nn.functional.logsigmoid), computed as min(x, 0) - log1p(exp(-|x|)): no
// underflow to -inf for very negative x, no rounding to 0 of the small values of large x.
Tensor log_sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
enum class GeluApprox { Tanh, Erf };
Tensor gelu(const Tensor& x, GeluApprox approx = GeluApprox::Tanh);
Tensor silu(const Tensor& x);
Tensor pow_scalar(const Tensor& x, double p);
// The gate's activation of a gated MLP: silu (SwiGLU, LLaMA) or the tanh GELU (GeGLU, Gemma's
// gelu_pytorch_tanh).
enum class GateAct { Silu, GeluTanh };
// SwiGLU (LLaMA's MLP activation): silu(gate) * up, silu(gate) rounded to the dtype first as
// transformers' two ops round it. Saves gate and up only. gate, up [..., F] -> [..., F].
// act GeluTanh: GeGLU, gelu_tanh(gate) * up, rounded the same way; likewise below.
Tensor swiglu(const Tensor& gate, const Tensor& up, GateAct act = GateAct::Silu);
// The same on one fused projection: gate_up [..., 2F] = [gate | up] -> [..., F]; one gradient.
Tensor swiglu_packed(const Tensor& gate_up, GateAct act = GateAct::Silu);
// The LLaMA MLP's down projection over it: swiglu_packed(gate_up) @ w^T + bias, w [out, F]. Keeps
// gate_up and w only: the activation is recomputed in the backward (linear would keep it).
Tensor swiglu_linear(const Tensor& gate_up, const Tensor& w, const Tensor& bias, GateAct act = GateAct::Silu);
// In place `a += b` (not recorded; for gradient accumulation and optimizers).
void add_(const Tensor& a, const Tensor& b);

// ---- reductions ----
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor sum_all(const Tensor& x);   // scalar (shape [])
Tensor mean_all(const Tensor& x);
// Sums `x` down to `shape` (inverse of broadcasting).
Tensor sum_to(const Tensor& x, const Shape& shape);
Tensor argmax(const Tensor& x);    // over the last dim, i64, not recorded

// ---- matrix products ----
// a [..., M, K] @ b [..., K, N] with broadcast batch dims; trans_* transposes the last two dims.
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);
// x [..., in] @ w[out, in]^T + bias[out] (bias may be undefined): PyTorch/HF Linear layout.
// weight_in_out: w is [in, out] (Hugging Face Conv1D, GPT-2). The bias rides in the GEMM epilogue.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias, bool weight_in_out = false);
// gelu(linear(x, w, bias), Tanh) with the GELU in the GEMM's epilogue on the GPU (one pass, no
// separate activation kernel) when out_features is a multiple of 8; the same autograd graph,
// saved tensors and allocations as the two ops (GPT-2's MLP c_fc).
Tensor linear_gelu(const Tensor& x, const Tensor& w, const Tensor& bias, bool weight_in_out = false);
// linear then GELU as two tensors: pre = linear(x, w, bias) (recorded) and act = gelu(pre)
// (data only, not recorded: for gelu_linear). The tanh GELU rides in the GEMM's epilogue as in
// linear_gelu; the erf GELU (or LEANTRAIN_GEMM_GELU=0) runs the GELU kernel on pre.
struct LinearGelu {
  Tensor pre, act;
};
LinearGelu linear_gelu_parts(const Tensor& x, const Tensor& w, const Tensor& bias, GeluApprox approx,
                             bool weight_in_out = false);
// linear(gelu(pre, approx), w, bias) saving pre only (not gelu(pre)): the backward recomputes
// gelu(pre) for the weight gradient. act: gelu(pre) when the caller has it (linear_gelu_parts),
// else computed here. An MLP keeps one hidden-width buffer per token instead of two.
// keep_act: save gelu(pre) too and read it for the weight gradient instead of recomputing it (the
// MLP of --no-lean-saves, which keeps both anyway): what is left of the backward is one GEMM for
// dW and one for d(pre) with the GELU's derivative in its epilogue (cuBLASLt's DGELU, tanh).
Tensor gelu_linear(const Tensor& pre, const Tensor& w, const Tensor& bias, GeluApprox approx,
                   bool weight_in_out = false, const Tensor& act = Tensor(), bool keep_act = false);
// linear(layer_norm(x, ln_w, ln_b, eps), w, bias) saving x, mean and rstd (what the norm's
// backward reads anyway), not the normalised rows: the backward recomputes them for dW.
// x, ln_w, ln_b, w and bias share one dtype.
Tensor layer_norm_linear(const Tensor& x, const Tensor& ln_w, const Tensor& ln_b, double eps, const Tensor& w,
                         const Tensor& bias, bool weight_in_out = false);
// layer_norm_linear whose output feeds a tanh GELU (an MLP's fc1): pre is layer_norm_linear's
// result (and autograd node); act = gelu_tanh(pre) from the same GEMM's epilogue (outside the
// graph: hand it to gelu_linear, whose backward goes through pre), or undefined where the
// epilogue does not apply (a width not a multiple of 8, LEANTRAIN_GEMM_GELU=0) and gelu_linear
// computes it.
LinearGelu layer_norm_linear_gelu(const Tensor& x, const Tensor& ln_w, const Tensor& ln_b, double eps, const Tensor& w,
                                  const Tensor& bias, bool weight_in_out = false);
// linear(self_attention_packed(qkv, heads, kv_heads, causal, mask), w, bias) saving qkv and the
// log-sum-exp (what the attention's backward reads anyway), not the attention output: the
// backward runs the attention forward again for dW and for the attention's own backward. C per
// token less per block, for one attention forward more (cheap when T is small against C).
Tensor attention_linear(const Tensor& qkv, int64_t heads, int64_t kv_heads, bool causal, const Tensor& mask,
                        const Tensor& w, const Tensor& bias, bool weight_in_out = false);
struct AttentionMask;
// The same with every mask kind (AttentionMask, below).
Tensor attention_linear(const Tensor& qkv, int64_t heads, int64_t kv_heads, const AttentionMask& mask, const Tensor& w,
                        const Tensor& bias, bool weight_in_out = false);

// ---- normalisation, softmax, attention ----
Tensor layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, double eps = 1e-5);  // over the last dim
// unit_offset: x * rstd * (1 + w) with 1 + w formed in f32 (Gemma's RMSNorm, weights initialised
// to zeros); the gradient of w is the same as without the offset.
Tensor rms_norm(const Tensor& x, const Tensor& w, double eps = 1e-6, bool unit_offset = false);
Tensor softmax(const Tensor& x);  // over the last dim
// Per-head RMSNorm of a packed projection x [..., W], W = (ha + hb) * D + rest (Qwen3's and Gemma 3's
// q_norm / k_norm over q | k | v): each of the first ha heads of D columns normalised as rms_norm
// does and scaled by wa [D], the next hb heads by wb [D] (w + 1 with unit_offset, Gemma's), the last
// `rest` columns passed through unchanged. One op: x is read in place (a view with rows of one
// stride), no slices, copies or concat; it saves x, the weights and the f32 rstd per head.
Tensor rms_norm_heads(const Tensor& x, const Tensor& wa, int64_t ha, const Tensor& wb, int64_t hb, double eps = 1e-6,
                      bool unit_offset = false);
// Residual add fused with the norm after it (pre-norm blocks: h = x + f(x); ln_2(h)):
// sum = x + residual (same shape and dtype) and y = norm(sum), forward in one pass, backward
// d(sum) = d(sum)_in + norm_backward(dy) in one pass: the gradient of both x and residual.
struct AddNormResult {
  Tensor sum, y;
};
AddNormResult add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& w, const Tensor& b,
                             double eps = 1e-5);
AddNormResult add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& w, double eps = 1e-6,
                           bool unit_offset = false);
// Which keys a query sees. Query i, key j (aligned: a = i + Tk - Tq when causal) is visible when
// every given rule holds:
//   causal       j <= a
//   key_padding  u8 [B, Tk], key_padding[b, j] != 0 (1 = attend)
//   window > 0   a - j < window (a sliding window of `window` keys ending at the query's own;
//                transformers' sliding_window_overlay; needs causal)
//   doc_pos      i32 [B, T], the position of each token inside its document, 0 at each document
//                start (documents packed one after another in a row): j >= i - doc_pos[b, i],
//                block-diagonal causal as FlashAttention's varlen (needs causal self-attention,
//                Tq == Tk). The same tensor gives rotary_embedding's positions.
// Work is proportional to the visible keys: the kernels skip key tiles outside the window or
// document; nothing T x T is stored or saved.
struct AttentionMask {
  bool causal = false;
  Tensor key_padding;
  int64_t window = 0;
  Tensor doc_pos;
};
// q [B,H,Tq,D], k/v [B,Hkv,Tk,D] with Hkv dividing H (Hkv < H: grouped-query attention, query
// head h reads kv head h / (H / Hkv), as Hugging Face's repeat_kv; K/V are never repeated);
// key_padding_mask u8 [B,Tk] (1 = attend) or undefined.
// scale <= 0 means 1/sqrt(D). Never materialises the Tq×Tk matrix on the GPU.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                    const Tensor& key_padding_mask = Tensor(), double scale = 0.0);
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask,
                                    double scale = 0.0);
// Which kernels the dense attention ops above and below run on CUDA (--attention-kernel; the
// process's setting, leantrain by default). cudnn: cuDNN 9's fused SDPA for every call, and a call
// it cannot take (f32, a key padding mask, a window, packed documents, a head dim other than a
// multiple of 8 up to 128, causal with Tq != Tk) is a one-line error; auto: cuDNN for the calls it
// can take, leantrain's kernels for the rest, and leantrain's too where cuDNN turns out missing or
// without an engine at run time. Decided per call from the setting, dtype, shapes and masks only,
// the same on every device, so a plan on meta replays the choice; CPU runs are unaffected (auto
// and leantrain run the CPU reference; cudnn asks for a CUDA device). Each backward through cuDNN
// allocates a workspace (category workspace) for its f32 dQ accumulator and row sums, and with
// grouped-query heads for the engine's scratch (backend/attention_workspace.h); its forward
// allocates nothing more.
void set_attention_kernel(AttentionKernel k);
AttentionKernel attention_kernel();
// Bytes of that backward workspace without grouped-query heads: 4 * B * H * Tq * (D + 1) (dQ in f32
// and one f32 per query row); with them the engine's scratch follows (backend/attention_workspace.h).
int64_t attention_cudnn_workspace_bytes(int64_t B, int64_t H, int64_t Tq, int64_t D);
// Self-attention on the fused projection, with no copies: qkv [B, T, 3*H*D] holds q | k | v
// along the last dim (heads inside each, as GPT-2's c_attn and torch's in_proj produce it);
// returns out [B, T, H*D] contiguous (heads merged). The kernels read q, k, v as strided views
// of qkv and write out and (backward) one dqkv [B, T, 3*H*D] directly. Saves qkv, out and lse.
Tensor self_attention_packed(const Tensor& qkv, int64_t heads, bool causal, const Tensor& key_padding_mask = Tensor(),
                             double scale = 0.0);
// The same with grouped-query attention: qkv [B, T, (H + 2*Hkv)*D] laid out [q (H*D) | k (Hkv*D) |
// v (Hkv*D)] (Hugging Face's q_proj, k_proj, v_proj outputs concatenated), Hkv dividing H; out
// [B, T, H*D]; dqkv has qkv's shape. kv_heads == heads is the call above.
Tensor self_attention_packed(const Tensor& qkv, int64_t heads, int64_t kv_heads, bool causal,
                             const Tensor& key_padding_mask = Tensor(), double scale = 0.0);
// Both layouts with every mask kind (kv_heads == heads: [B, T, 3C]).
Tensor self_attention_packed(const Tensor& qkv, int64_t heads, int64_t kv_heads, const AttentionMask& mask,
                             double scale = 0.0);
// (qkv, heads, kv_heads) with causal left out would bind kv_heads to the first overload's causal.
Tensor self_attention_packed(const Tensor& qkv, int64_t heads, int kv_heads) = delete;
// Block-sparse self-attention (BigBird's): the sequence is n blocks of `block` rows; query block i
// attends to the key blocks listed in row i of `table` (int [n, slots], -1 = an empty slot, a block
// listed twice counts twice, as transformers' eval-mode random blocks do), except the first and the
// last query block, which attend to every key. qkv [B, n * block, 3*H*D] -> out [B, T, H*D]. Keys
// with key_padding_mask 0 are left out everywhere. No T x T tensor: the listed key blocks are
// gathered ([B, n, slots, block, 2*H*D], freed after the call) and the dense kernels run on them.
Tensor block_sparse_attention_packed(const Tensor& qkv, int64_t heads, int64_t block, const std::vector<int32_t>& table,
                                     const Tensor& key_padding_mask = Tensor(), double scale = 0.0);

// ---- embeddings ----
// ids [...] -> [..., C]; ids checked in range. As torch's nn.Embedding(padding_idx): the lookups of
// id padding_idx add nothing to the table's gradient (-1: every lookup does).
Tensor embedding(const Tensor& ids, const Tensor& weight, int64_t padding_idx = -1);
// u8 [...] with 1 where ids != pad_id (a real token) and 0 at padding: an encoder's
// key_padding_mask from a right-padded batch, made on the ids' device (no host copy). Not recorded.
Tensor padding_mask(const Tensor& ids, int64_t pad_id);
// A table whose lookups hand their gradient to `sink` (the ids [N] and the gradient rows [N, C])
// instead of adding it into the table's .grad through autograd: the data-parallel hook reduces
// a tied table's dense part (the LM head's) early and its sparse rows apart
// (src/dist/data_parallel.cpp). The lookup still records a backward, on an anchor leaf of its
// own. An empty sink removes the table's entry; an entry ends with its table.
// skip_id is the lookup's padding_idx (-1: none), for the sink's embedding_bwd.
using TableGradSink = std::function<void(const Tensor& ids, const Tensor& rows, int64_t skip_id)>;
void set_table_grad_sink(const Tensor& table, TableGradSink sink);
// Rotary position embedding in transformers' rotate-half convention (apply_rotary_pos_emb):
// pairs (i, i + D/2) turn by angle f32(inv_freq[i] * (pos_offset + t)), computed in f32 as
// transformers computes its freqs, cos and sin; the rotation is rounded once to x's dtype.
// x [B, H, T, D], the default frequencies of `base` (rope_inv_freq).
Tensor rotary_embedding(const Tensor& x, double base = 10000.0, int64_t pos_offset = 0);
// x [B, T, N*D]: N heads of D = 2 * inv_freq.size() along the last dim (a packed q | k | v
// projection); the first rotary_heads heads are rotated, the others pass through unchanged.
// head_dim > 2 * inv_freq.size(): partial rotary (transformers' partial_rotary_factor): heads of
// head_dim whose first 2 * inv_freq.size() dims rotate and the rest pass through; 0: no partial.
// Saves nothing for its backward (the inverse rotation).
Tensor rotary_embedding_packed(const Tensor& x, const std::vector<float>& inv_freq, int64_t rotary_heads,
                               int64_t pos_offset = 0, int64_t head_dim = 0);
// The same two with per-token positions: positions i32 [B, T] (e.g. AttentionMask::doc_pos of
// packed documents, restarting at 0 per document) on x's device, each >= 0; token t of row b
// turns by inv_freq[i] * positions[b, t]. x [B, H, T, D] or [B, T, N*D] as above.
Tensor rotary_embedding(const Tensor& x, double base, const Tensor& positions);
Tensor rotary_embedding_packed(const Tensor& x, const std::vector<float>& inv_freq, int64_t rotary_heads,
                               const Tensor& positions, int64_t head_dim = 0);
// The largest head dim the rotary ops take.
inline constexpr int64_t kRopeMaxHeadDim = 512;
// transformers' default inverse frequencies 1 / base^(2i/D), i < D/2, in f32 as it computes them.
std::vector<float> rope_inv_freq(int64_t head_dim, double base);

// ---- Gated DeltaNet (Qwen3.5's linear attention) ----
// The gated delta rule as transformers' torch_chunk_gated_delta_rule computes it with
// use_qk_l2norm_in_kernel: per value head h (reading key head h / (Hv / Hk)), q and k
// l2-normalised (x / sqrt(|x|^2 + 1e-6)), q scaled by Dk^-1/2, S_0 = 0,
//   S_t = exp(g_t) S_{t-1} + k_t beta_t (v_t - exp(g_t) S_{t-1}^T k_t)^T,  o_t = S_t^T q_t,
// in f32 (f64 for f64 inputs), by chunks of `chunk` <= 64 steps (ops/gated_delta.cpp). q, k
// [B, T, Hk, Dk] and v [B, T, Hv, Dv] of one floating dtype, g [B, T, Hv] the log decay in f32
// (f64 for f64), beta [B, T, Hv] in q's dtype. Returns o [B, T, Hv, Dv] in v's dtype. Saves its
// inputs and the state at each chunk's start (B Hv ceil(T / chunk) Dk Dv f32).
// doc_pos: packed documents (AttentionMask::doc_pos: i32 [B, T], 0 at each document's start, on
// q's device), or undefined. With it S restarts at 0 at each document's start, so each document's
// outputs and gradients are those of the document alone; the chunks, memory and saved bytes are
// the same (docs/decisions.md, "Packed documents in the Gated DeltaNet").
Tensor gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                        int64_t chunk = 64, const Tensor& doc_pos = Tensor());
// The same on the packed convolution output qkv [B, T, 2 Hk Dk + Hv Dv] (q | k | v), read in place,
// with one gradient for all three.
Tensor gated_delta_rule_packed(const Tensor& qkv, int64_t key_heads, int64_t key_dim, int64_t value_heads,
                               int64_t value_dim, const Tensor& g, const Tensor& beta, int64_t chunk = 64,
                               const Tensor& doc_pos = Tensor());
// Gated DeltaNet's log decay g = -exp(a_log) softplus(a + dt_bias) (torch's softplus), in f32
// (f64 for f64 a): a [..., H] (e.g. a column slice of a projection, read in place), a_log and
// dt_bias [H] of any floating dtype. Returns [..., H].
Tensor gated_delta_decay(const Tensor& a, const Tensor& a_log, const Tensor& dt_bias);
// The causal depthwise convolution over time: x [B, T, C], w [C, K] (x's dtype);
// out[b, t, c] = sum_j w[c, j] x[b, t - K + 1 + j, c] (zeros before the start), rounded, then
// (silu) its SiLU, as transformers' causal_conv1d_fn. Saves x and w only. doc_pos (packed
// documents, as gated_delta_rule's): zeros before each document's start instead of the row's.
Tensor causal_conv1d(const Tensor& x, const Tensor& w, bool silu = true, const Tensor& doc_pos = Tensor());
// The gated RMSNorm (transformers' Qwen3_5RMSNormGated) over each group of D = w.size(0) columns
// of the last dim: round(round(x rstd) w) * silu(z), rounded; x and z of one shape and dtype, w [D].
Tensor rms_norm_gated(const Tensor& x, const Tensor& z, const Tensor& w, double eps = 1e-6);

// ---- images: convolution, batch norm, pooling (ResNet), NCHW or NHWC ----
// A (height, width) pair; one number means both.
struct Size2 {
  int64_t h = 1, w = 1;
  Size2(int64_t v) : h(v), w(v) {}  // NOLINT: implicit, as torch's int-or-pair arguments
  Size2(int64_t h_, int64_t w_) : h(h_), w(w_) {}
};
// How an image batch is stored: NCHW [N, C, H, W] (torch's default), or NHWC [N, H, W, C] (what
// torch's channels_last stores; here the tensor's shape says it). cuDNN runs 16-bit
// convolutions on tensor cores only for NHWC.
enum class ImageLayout : uint8_t { NCHW, NHWC };
// torch.nn.functional.conv2d with dilation 1 and groups 1: x [N, C, H, W], w [O, C, KH, KW],
// bias [O] or undefined, one dtype -> [N, O, OH, OW], OH = (H + 2 padding.h - KH) / stride.h + 1.
// NHWC: x [N, H, W, C] -> [N, OH, OW, O]; w keeps torch's [O, C, KH, KW] and is copied to
// [O, KH, KW, C] for the call (its gradient goes back through that copy).
// Saves x (for dw) and w (for dx), only those needed. Each forward and backward call allocates
// a u8 workspace of conv_workspace_bytes (category workspace) for cuDNN, freed when it returns.
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias = Tensor(), Size2 stride = 1, Size2 padding = 0,
              ImageLayout layout = ImageLayout::NCHW);
// The cuDNN workspace of a convolution of x into y (either layout): min(the limit, bytes of x +
// bytes of y), from the shapes and dtype alone, so every device allocates the same bytes.
int64_t conv_workspace_bytes(const Shape& x, const Shape& y, DType dtype);
// The limit (default 64 MiB; 0: no workspace, cuDNN's workspace-free algorithms only).
void set_conv_workspace_limit(int64_t bytes);
int64_t conv_workspace_limit();
// torch.nn.functional.batch_norm over x [N, C, H, W] ([N, H, W, C] for NHWC; any floating dtype)
// with w, b [C] and running_mean, running_var [C] (one floating dtype, may differ from x's: f32
// statistics under 16-bit autocast). training: normalises with the batch's statistics (biased
// variance) and, when running_mean is defined, updates the running statistics in place
// (momentum, unbiased variance) and adds 1 to num_batches_tracked (i64 [], or undefined), except
// while a checkpointed region is recomputed (recomputing_checkpoint(): the forward updated them
// once). Eval: normalises with the running statistics. Saves x, w and the [C] f32 mean and 1/std.
// NHWC allocates an f32 [2, G, C] scratch (category workspace; G = 1 to 256 row chunks) for
// each call, which the GPU reduces through.
Tensor batch_norm(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& running_mean,
                  const Tensor& running_var, const Tensor& num_batches_tracked, bool training, double momentum = 0.1,
                  double eps = 1e-5, ImageLayout layout = ImageLayout::NCHW);
// relu(batch_norm(...)) as one op: the same values and gradients to the bit, one pass over the
// activations fewer each way, and the same saved bytes (x for the norm, the output for the relu).
Tensor batch_norm_relu(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& running_mean,
                       const Tensor& running_var, const Tensor& num_batches_tracked, bool training,
                       double momentum = 0.1, double eps = 1e-5, ImageLayout layout = ImageLayout::NCHW);
// relu(add(batch_norm(x, ...), residual)) as one op (a ResNet block's last norm and its shortcut):
// the same bits, the residual shaped and typed as x; it keeps what the three keep (x for the norm,
// the output for the relu) and allocates neither intermediate.
Tensor batch_norm_add_relu(const Tensor& x, const Tensor& residual, const Tensor& w, const Tensor& b,
                           const Tensor& running_mean, const Tensor& running_var, const Tensor& num_batches_tracked,
                           bool training, double momentum = 0.1, double eps = 1e-5,
                           ImageLayout layout = ImageLayout::NCHW);
// torch.nn.functional.max_pool2d (dilation 1, no ceil mode; kernel.h * kernel.w <= 256, padding
// at most half the kernel): x [N, C, H, W] -> [N, C, OH, OW] (NHWC: [N, H, W, C] -> [N, OH, OW,
// C]). Saves one byte per output (the window position of its maximum), not x.
Tensor max_pool2d(const Tensor& x, Size2 kernel, Size2 stride, Size2 padding = 0,
                  ImageLayout layout = ImageLayout::NCHW);

// ---- loss and regularisation ----
enum class Reduction { Mean, Sum, None };
// logits [N, V], targets i64 [N]; mean is over non-ignored rows. Never builds full-vocabulary
// fp32 probabilities beyond one row at a time on the GPU.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100,
                     Reduction reduction = Reduction::Mean);
// The mean cross_entropy of logits nothing reads afterwards (a model's training loss): with a
// gradient to compute, the forward writes d(loss)/d(logits) over the logits in the same pass
// (one read of them instead of three) and the backward hands that buffer on. The logits' values
// are gone after the call. Otherwise, or for rows other than a linear's padded ones, it is
// cross_entropy.
Tensor cross_entropy_in_place(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100);
// cross_entropy(linear(hidden, weight), targets) without the [N, V] logits: hidden [..., C],
// weight [V, C] (a bias-free head, torch layout), targets [N] (N = hidden's rows). Rows go through
// the head `chunk` at a time (0: as many as fit 256 MiB of f32 logits); the backward recomputes
// each chunk's logits. Reduction::None gives the per-row losses (shaped as targets, 0 where
// ignored), as cross_entropy does.
Tensor linear_cross_entropy(const Tensor& hidden, const Tensor& weight, const Tensor& targets,
                            int64_t ignore_index = -100, Reduction reduction = Reduction::Mean, int64_t chunk = 0);
// Identity when !training or p == 0. The mask is regenerated in backward from (seed, offset).
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen);

}  // namespace lt
