// Scaled dot-product attention. The forward keeps only out and the per-row log-sum-exp (lse);
// the backward recomputes the probabilities from q, k and lse, so no Tq x Tk tensor is ever
// allocated through the allocator (the CUDA kernel tiles; the CPU reference uses host scratch).
#include <atomic>
#include <cmath>

#include "autograd/kept_outputs.h"
#include "backend/attention_workspace.h"
#include "leantrain/usage_error.h"
#include "memory/host_allocators.h"
#include "ops/op_common.h"
#include "ops/packed_attention.h"

namespace lt {
using namespace detail;

namespace {
std::atomic<AttentionKernel> g_attention_kernel{AttentionKernel::Leantrain};
}  // namespace

void set_attention_kernel(AttentionKernel k) { g_attention_kernel.store(k); }
AttentionKernel attention_kernel() { return g_attention_kernel.load(); }

// Without grouped-query heads; backend/attention_workspace.h has the general layout (the CUDA
// backend lays cuDNN's buffers by it, the front-end allocates by it).
int64_t attention_cudnn_workspace_bytes(int64_t B, int64_t H, int64_t Tq, int64_t D) {
  return attention_ws::bytes(B, H, H, Tq, Tq, D);
}

Tensor scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, bool causal,
                                    const Tensor& mask_in, double scale) {
  AttentionMask m;
  m.causal = causal;
  m.key_padding = mask_in;
  return scaled_dot_product_attention(q_in, k_in, v_in, m, scale);
}

Tensor scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                                    const AttentionMask& am, double scale) {
  const char* name = "scaled_dot_product_attention";
  OpNameScope op("attention");
  const Tensor& mask_in = am.key_padding;
  const bool causal = am.causal;
  const int64_t window = am.window < k_in.size(2) ? am.window : 0;  // a window of >= Tk keys is plain causal
  Device dev = common_device(name, {q_in, k_in, v_in, mask_in, am.doc_pos});
  check_floating(name, q_in);
  check_same_dtype(name, q_in, k_in);
  check_same_dtype(name, q_in, v_in);
  check_rank(name, q_in, 4, "q [B, H, Tq, D]");
  check_rank(name, k_in, 4, "k [B, Hkv, Tk, D]");
  check_rank(name, v_in, 4, "v [B, Hkv, Tk, D]");
  const int64_t B = q_in.size(0), H = q_in.size(1), Tq = q_in.size(2), D = q_in.size(3), Tk = k_in.size(2);
  const int64_t Hkv = k_in.size(1);
  const std::string shapes =
      "q " + shape_str(q_in.shape()) + ", k " + shape_str(k_in.shape()) + ", v " + shape_str(v_in.shape());
  LT_CHECK(k_in.size(0) == B && k_in.size(3) == D && v_in.shape() == k_in.shape(),
           std::string(name) + ": q, k, v shapes do not fit", shapes,
           "use q [B, H, Tq, D] and k, v [B, Hkv, Tk, D] with equal B and D");
  // Grouped-query attention: query head h reads kv head h / (H / Hkv); K and V are not repeated.
  LT_CHECK(Hkv == H || (Hkv > 0 && H % Hkv == 0),
           std::string(name) + ": q's " + std::to_string(H) + " heads are not a multiple of k/v's " +
               std::to_string(Hkv) + " heads",
           shapes, "use a kv head count that divides the query head count");
  LT_CHECK(D > 0 && Tq > 0 && Tk > 0, std::string(name) + ": empty head dim or sequence", shapes,
           "pass at least one query, one key and D > 0");
  check_key_padding_mask(name, mask_in, B, Tk);
  const Tensor doc = check_mask_kinds(name, am, B, Tq, Tk);
  const float sc = scale > 0 ? float(scale) : float(1.0 / std::sqrt(double(D)));
  Tensor q = contiguous(q_in), k = contiguous(k_in), v = contiguous(v_in);
  Tensor mask = mask_in.defined() ? contiguous_data(mask_in) : Tensor();
  const AttentionRoute route =
      route_attention(name, dev, q.dtype(), Tq, Tk, D, causal, mask.defined(), window, doc.defined(), {&q, &k, &v});
  std::vector<Tensor> kept = take_kept_outputs("attention", {q.shape(), {B, H, Tq}}, {q.dtype(), aux_dtype(q.dtype())});
  Tensor out = kept.empty() ? Tensor::empty(q.shape(), q.dtype(), dev) : kept[0];
  Tensor lse = kept.empty() ? Tensor::empty({B, H, Tq}, aux_dtype(q.dtype()), dev) : kept[1];
  if (kept.empty()) {
    if (route.cudnn) backend_for(dev).attention_fwd_cudnn(out, lse, q, k, v, causal, sc, route.strict);
    else backend_for(dev).attention_fwd(out, lse, q, k, v, mask, causal, window, doc, sc);
    keep_outputs("attention", {out, lse});
  }
  if (!needs_grad({q, k, v})) return out;
  // Every gradient needs the probabilities (q, k, lse) and v or out; save them all.
  const bool need_q = q.requires_grad(), need_k = k.requires_grad(), need_v = v.requires_grad();
  SavedTensor saved_q(q), saved_k(k), saved_v(v), saved_out(out.detach()), saved_lse(lse), saved_mask(mask);
  SavedTensor saved_doc(doc);  // the caller's i32 [B, T]: no new bytes
  record(out, "attention", {q, k, v}, [=](const Tensor& g) {
    Tensor sq = saved_q.unpack(), sk = saved_k.unpack(), sv = saved_v.unpack();
    Tensor so = saved_out.unpack(), slse = saved_lse.unpack(), smask = saved_mask.unpack();
    Tensor dq = Tensor::empty(sq.shape(), g.dtype(), g.device());
    Tensor dk = Tensor::empty(sk.shape(), g.dtype(), g.device());
    Tensor dv = Tensor::empty(sv.shape(), g.dtype(), g.device());
    if (route.cudnn) {
      Tensor ws = cudnn_attention_workspace(B, H, Hkv, Tq, Tk, D, g.device());
      backend_of(g).attention_bwd_cudnn(dq, dk, dv, contiguous_data(g), sq, sk, sv, so, slse, ws, causal, sc,
                                        route.strict);
    } else {
      backend_of(g).attention_bwd(dq, dk, dv, contiguous_data(g), sq, sk, sv, so, slse, smask, causal, window,
                                  saved_doc.unpack(), sc);
    }
    return std::vector<Tensor>{need_q ? dq : Tensor(), need_k ? dk : Tensor(), need_v ? dv : Tensor()};
  });
  return out;
}

namespace detail {

AttentionRoute route_attention(const char* op, Device dev, DType dt, int64_t Tq, int64_t Tk, int64_t D, bool causal,
                               bool padded, int64_t window, bool docs, std::initializer_list<const Tensor*> operands) {
  const AttentionKernel choice = attention_kernel();
  if (choice == AttentionKernel::Leantrain) return {};
  const bool strict = choice == AttentionKernel::Cudnn;
  // On the CPU (and a meta standing for it) there is no cuDNN: auto runs the reference.
  const bool on_cuda = dev.is_cuda() || (dev.is_meta() && meta_simulates_cuda());
  if (!on_cuda && !strict) return {};
  // Why cuDNN's fused attention cannot take this call ("" when it can).
  std::string why;
  if (!on_cuda) why = "it runs on CUDA devices only (this call is on " + dev.str() + ")";
  else if (dt != DType::BF16 && dt != DType::F16) why = std::string("it takes bf16 or f16, not ") + dtype_name(dt);
  else if (padded) why = "it takes no key padding mask here";
  else if (window > 0) why = "it takes no sliding window here";
  else if (docs) why = "it takes no packed documents (doc_pos) here";
  else if (causal && Tq != Tk) why = "causal attention needs Tq == Tk here (" + std::to_string(Tq) + " vs " + std::to_string(Tk) + ")";
  // cuDNN's SDPA engines on Hopper take head dims up to 256 (Gemma 3's and Qwen3.5's attention);
  // an engine list without one for a shape is cuDNN's Unsupported, which auto falls back from.
  else if (D % 8 != 0 || D > 256) why = "head dim " + std::to_string(D) + " is not a multiple of 8 up to 256";
  else
    for (const Tensor* t : operands) {
      bool aligned = t->offset() % 8 == 0 && t->strides()[3] == 1;
      for (int d = 0; d < 3; ++d) aligned = aligned && (t->size(d) == 1 || t->strides()[size_t(d)] % 8 == 0);
      if (!aligned) {
        why = "an operand's rows are not 16-byte aligned (offset " + std::to_string(t->offset()) + ", strides " +
              shape_str(t->strides()) + ")";
        break;
      }
    }
  if (why.empty()) return {true, strict};
  if (strict)
    throw UsageError(std::string(op) + ": --attention-kernel cudnn cannot run this attention",
                     "cuDNN's fused attention: " + why,
                     "pass --attention-kernel auto to run leantrain's kernels where cuDNN cannot, or leantrain");
  return {};
}

Tensor cudnn_attention_workspace(int64_t B, int64_t H, int64_t Hkv, int64_t Tq, int64_t Tk, int64_t D, Device dev) {
  MemoryCategoryScope cat(Category::Workspace);
  return Tensor::empty({attention_ws::bytes(B, H, Hkv, Tq, Tk, D)}, DType::U8, dev);
}

Tensor check_mask_kinds(const char* name, const AttentionMask& m, int64_t B, int64_t Tq, int64_t Tk) {
  const std::string op(name);
  LT_CHECK(m.window >= 0, op + ": window " + std::to_string(m.window) + " is negative",
           "window is the number of keys a query sees, ending at its own (0 = no window)", "pass window >= 0");
  LT_CHECK(m.window == 0 || m.causal, op + ": window " + std::to_string(m.window) + " without causal",
           "a sliding window is defined on causal attention only (keys j with i - window < j <= i)",
           "set causal = true or window = 0");
  if (!m.doc_pos.defined()) return Tensor();
  const Tensor& d = m.doc_pos;
  LT_CHECK(m.causal, op + ": doc_pos without causal",
           "packed documents are causal self-attention (a block-diagonal causal mask)", "set causal = true");
  LT_CHECK(Tq == Tk, op + ": doc_pos with " + std::to_string(Tq) + " queries and " + std::to_string(Tk) + " keys",
           "packed documents are self-attention: queries and keys are the same tokens", "use Tq == Tk");
  LT_CHECK(d.dtype() == DType::I32 && d.shape() == Shape({B, Tq}),
           op + ": doc_pos is " + dtype_name(d.dtype()) + " " + shape_str(d.shape()),
           "it must be i32 [B, T] = [" + std::to_string(B) + ", " + std::to_string(Tq) +
               "]: each token's position inside its document",
           "build it as int32 with the batch's shape");
  Tensor dc = contiguous_data(d);
  // On the CPU the restart sequence is cheap to check (one pass); on a GPU it would cost a copy
  // and a synchronisation per layer, so it is the caller's duty there (docs/decisions.md), unless
  // the loader kept the batch's bytes on the host.
  check_doc_pos_values(op, dc);
  return dc;
}

// [B, H, T, D] view of the heads of a [B, T, W] row-major tensor whose heads start `col`
// elements into each row: (b, h, t, d) -> b*T*W + t*W + col + h*D + d. Not recorded.
Tensor PackedAttention::heads_view(const Tensor& x, int64_t heads, int64_t col) const {
  const int64_t B = x.size(0), T = x.size(1), W = x.size(2);
  return make_view(x, {B, heads, T, D}, {T * W, D, W, 1}, x.offset() + col);
}

PackedAttention prepare_packed_attention(const char* name, const Tensor& qkv_in, int64_t heads, int64_t kv_heads,
                                         const AttentionMask& am, double scale) {
  const Tensor& mask_in = am.key_padding;
  Device dev = common_device(name, {qkv_in, mask_in, am.doc_pos});
  check_floating(name, qkv_in);
  check_rank(name, qkv_in, 3, "qkv [B, T, (H + 2 Hkv) D]");
  const int64_t B = qkv_in.size(0), T = qkv_in.size(1), W = qkv_in.size(2);
  if (kv_heads == heads) {  // multi-head attention: qkv [B, T, 3C]
    LT_CHECK(W > 0 && W % 3 == 0,
             std::string(name) + ": qkv's last dim " + std::to_string(W) + " (shape " + shape_str(qkv_in.shape()) +
                 ") is not divisible by 3",
             "q, k and v are packed along it as [q | k | v], each C = heads * head_dim wide",
             "pass the fused projection's output [B, T, 3C]");
    LT_CHECK(heads > 0 && (W / 3) % heads == 0,
             std::string(name) + ": width C = " + std::to_string(W / 3) + " (qkv " + shape_str(qkv_in.shape()) +
                 ") is not divisible by " + std::to_string(heads) + " heads",
             "each of q, k, v is split into heads of equal size C / heads",
             "use a head count that divides the model width");
  } else {
    LT_CHECK(heads > 0 && kv_heads > 0 && heads % kv_heads == 0,
             std::string(name) + ": " + std::to_string(heads) + " query heads are not a multiple of " +
                 std::to_string(kv_heads) + " kv heads",
             "each kv head serves heads / kv_heads query heads", "use a kv head count that divides the head count");
    const int64_t parts = heads + 2 * kv_heads;
    LT_CHECK(W > 0 && W % parts == 0,
             std::string(name) + ": qkv's last dim " + std::to_string(W) + " (shape " + shape_str(qkv_in.shape()) +
                 ") is not divisible by heads + 2 * kv_heads = " + std::to_string(parts),
             "q, k and v are packed along it as [q (heads * D) | k (kv_heads * D) | v (kv_heads * D)]",
             "pass the concatenated q, k, v projections [B, T, (heads + 2 kv_heads) * head_dim]");
  }
  LT_CHECK(T > 0, std::string(name) + ": empty sequence (qkv " + shape_str(qkv_in.shape()) + ")",
           "attention needs at least one token", "pass T >= 1");
  check_key_padding_mask(name, mask_in, B, T);
  PackedAttention a;
  a.doc_pos = check_mask_kinds(name, am, B, T, T);
  a.window = am.window < T ? am.window : 0;  // a window of >= T keys is plain causal
  a.dev = dev;
  a.B = B;
  a.T = T;
  a.H = heads;
  a.Hkv = kv_heads;
  a.D = W / (heads + 2 * kv_heads);
  a.C = a.H * a.D;
  a.causal = am.causal;
  a.scale = scale > 0 ? float(scale) : float(1.0 / std::sqrt(double(a.D)));
  a.qkv = contiguous(qkv_in);  // a no-op for a Linear's output
  a.mask = mask_in.defined() ? contiguous_data(mask_in) : Tensor();
  const Tensor q = a.q_of(a.qkv), k = a.k_of(a.qkv), v = a.v_of(a.qkv);
  a.route = route_attention(name, dev, a.qkv.dtype(), T, T, a.D, a.causal, a.mask.defined(), a.window,
                            a.doc_pos.defined(), {&q, &k, &v});
  return a;
}

void PackedAttention::forward(const Tensor& out, const Tensor& lse, const Tensor& qkv_now, const Tensor& mask_now,
                              const Tensor& doc_now) const {
  if (route.cudnn)
    return backend_for(dev).attention_fwd_cudnn(heads_view(out, H, 0), lse, q_of(qkv_now), k_of(qkv_now),
                                                v_of(qkv_now), causal, scale, route.strict);
  backend_for(dev).attention_fwd(heads_view(out, H, 0), lse, q_of(qkv_now), k_of(qkv_now), v_of(qkv_now), mask_now,
                                 causal, window, doc_now, scale);
}

Tensor PackedAttention::backward(const Tensor& g, const Tensor& qkv_now, const Tensor& out, const Tensor& lse,
                                 const Tensor& mask_now, const Tensor& doc_now) const {
  Tensor dqkv = Tensor::empty(qkv_now.shape(), g.dtype(), g.device());
  Tensor gc = contiguous_data(g);
  if (route.cudnn) {
    Tensor ws = cudnn_attention_workspace(B, H, Hkv, T, T, D, g.device());
    backend_of(g).attention_bwd_cudnn(q_of(dqkv), k_of(dqkv), v_of(dqkv), heads_view(gc, H, 0), q_of(qkv_now),
                                      k_of(qkv_now), v_of(qkv_now), heads_view(out, H, 0), lse, ws, causal, scale,
                                      route.strict);
    return dqkv;
  }
  backend_of(g).attention_bwd(q_of(dqkv), k_of(dqkv), v_of(dqkv), heads_view(gc, H, 0), q_of(qkv_now), k_of(qkv_now),
                              v_of(qkv_now), heads_view(out, H, 0), lse, mask_now, causal, window, doc_now, scale);
  return dqkv;
}

}  // namespace detail

// Self-attention straight from the fused projection: q, k, v are strided views of qkv and the
// kernels write out [B, T, H*D] (heads merged) directly, so no copy is made and no tensor of the
// split or merged heads is saved. Saved: qkv (the projection's output, which is saved nowhere
// else), out (the next Linear saves it anyway) and lse. The backward writes dq, dk and dv
// straight into one dqkv buffer of qkv's shape. With kv_heads < heads (grouped-query attention)
// qkv is [q (H*D) | k (Hkv*D) | v (Hkv*D)] and the kernels read each kv head for its H / Hkv
// query heads: K and V are neither repeated nor saved at H heads.
Tensor self_attention_packed(const Tensor& qkv_in, int64_t heads, int64_t kv_heads, const AttentionMask& am,
                             double scale) {
  OpNameScope op("attention");
  const PackedAttention a = prepare_packed_attention("self_attention_packed", qkv_in, heads, kv_heads, am, scale);
  // Selective checkpointing's recomputation takes the forward's output and log-sum-exp instead
  // (kept_outputs.h): attention is not run a second time before its backward.
  std::vector<Tensor> kept =
      take_kept_outputs("attention", {{a.B, a.T, a.C}, {a.B, a.H, a.T}}, {a.qkv.dtype(), aux_dtype(a.qkv.dtype())});
  Tensor out = kept.empty() ? Tensor::empty({a.B, a.T, a.C}, a.qkv.dtype(), a.dev) : kept[0];
  Tensor lse = kept.empty() ? Tensor::empty({a.B, a.H, a.T}, aux_dtype(a.qkv.dtype()), a.dev) : kept[1];
  if (kept.empty()) {
    a.forward(out, lse, a.qkv, a.mask, a.doc_pos);
    keep_outputs("attention", {out, lse});
  }
  if (!needs_grad({a.qkv})) return out;
  SavedTensor saved_qkv(a.qkv), saved_out(out.detach()), saved_lse(lse), saved_mask(a.mask), saved_doc(a.doc_pos);
  PackedAttention shape_only = a;  // the backward reads the saved tensors, not these
  shape_only.qkv = shape_only.mask = shape_only.doc_pos = Tensor();
  record(out, "attention", {a.qkv}, [=](const Tensor& g) {
    return std::vector<Tensor>{shape_only.backward(g, saved_qkv.unpack(), saved_out.unpack(), saved_lse.unpack(),
                                                   saved_mask.unpack(), saved_doc.unpack())};
  });
  return out;
}

Tensor self_attention_packed(const Tensor& qkv, int64_t heads, int64_t kv_heads, bool causal, const Tensor& mask,
                             double scale) {
  AttentionMask m;
  m.causal = causal;
  m.key_padding = mask;
  return self_attention_packed(qkv, heads, kv_heads, m, scale);
}

Tensor self_attention_packed(const Tensor& qkv, int64_t heads, bool causal, const Tensor& mask, double scale) {
  return self_attention_packed(qkv, heads, heads, causal, mask, scale);
}

}  // namespace lt
