// Linears whose input is cheap to recompute from a tensor that is saved anyway: they save that
// tensor instead of their own input, and recompute the input in the backward for the weight
// gradient (one elementwise or row pass over a buffer that lives only inside the backward).
//   gelu_linear:        linear(gelu(pre)) saves pre (which the GELU's backward needs anyway),
//                       not gelu(pre): an MLP keeps one 4C buffer per token instead of two.
//   layer_norm_linear:  linear(layer_norm(x)) saves x, mean and rstd (which the norm's backward
//                       needs anyway), not the normalised rows: C per token less per norm.
//   attention_linear:   linear(attention(qkv)) saves qkv and the log-sum-exp (which attention's
//                       backward needs anyway), not the attention output: C per token less per
//                       block, for one more attention forward in the backward.
// The recomputation runs the forward's own kernel on the same inputs, so the backward sees the
// same values the forward used (docs/memory-model.md, "What a block keeps").
#include "autograd/kept_outputs.h"
#include "ops/linear_args.h"
#include "ops/packed_attention.h"

namespace lt {
using namespace detail;

namespace {

UnaryOp gelu_op(GeluApprox approx) { return approx == GeluApprox::Tanh ? UnaryOp::GeluTanh : UnaryOp::GeluErf; }

Tensor gelu_of(UnaryOp op, const Tensor& pre) {
  Tensor act = Tensor::empty(pre.shape(), pre.dtype(), pre.device());
  backend_of(pre).unary(op, act, pre, 0.f);
  return act;
}

// The GEMM of a linear over `in` (the recomputable input, already computed), with the kept-
// outputs protocol of linear() so that selective checkpointing sees the same sequence.
Tensor linear_forward(const LinearArgs& a, const Tensor& in, const Tensor& bias, bool weight_in_out) {
  OpNameScope op_name("linear");
  const int64_t ldc = padded_row_stride(a.outf, a.xc.dtype());
  std::vector<Tensor> kept = take_kept_outputs("linear", {a.out_shape}, {a.xc.dtype()});
  if (!kept.empty()) return kept[0];
  Tensor out = empty_rows(a.out_shape, ldc, a.xc.dtype(), a.dev);
  GemmDesc d = a.desc(ldc);
  d.lda = padded_rows(in);
  d.trans_b = !weight_in_out;
  backend_for(a.dev).gemm(out, in, a.wc, d, bias);
  keep_outputs("linear", {out});
  return out;
}

// dW and db of a linear, in `dtype` (ParamGradTargets), from its gradient g2 [rows, out] and its
// recomputed input `in` (rows of in_features; undefined when dW is not needed).
WeightBiasGrad linear_param_grads(const Tensor& g2, const Tensor& in, int64_t rows, int64_t in_features,
                                  bool weight_in_out, bool need_w, bool need_b, DType dtype) {
  return weight_bias_grad(g2, need_w ? reshape(in, {rows, in_features}) : Tensor(), weight_in_out, need_w, need_b,
                          dtype);
}

// d(gelu(pre)) = (g2 W^T) * gelu'(pre): with the tanh GELU in the GEMM's epilogue (gemm_dgelu)
// when the operands allow, else the product and then the GELU's backward in place (the kernels
// are elementwise, each element read before it is written, so one [rows, in] buffer serves both).
Tensor gelu_input_grad(UnaryOp op, const Tensor& g2, const Tensor& w, const Tensor& pre, bool weight_in_out) {
  const int64_t rows = g2.size(0), outf = g2.size(1), in = pre.numel() / rows;
  if (op == UnaryOp::GeluTanh && gemm_gelu_enabled() && g2.is_contiguous() && w.is_contiguous() &&
      pre.is_contiguous() && g2.dtype() == w.dtype() && g2.dtype() == pre.dtype()) {
    GemmDesc d;
    d.m = rows;
    d.n = in;
    d.k = outf;
    d.trans_b = weight_in_out;  // [in, out] weights are read transposed
    Tensor gpre = Tensor::empty(pre.shape(), pre.dtype(), pre.device());
    backend_of(g2).gemm_dgelu(gpre, g2, w, d, pre);
    return gpre;
  }
  Tensor gpre = reshape(matmul(g2, w, false, weight_in_out), pre.shape());
  backend_of(g2).unary_backward(op, gpre, gpre, pre, 0.f);
  return gpre;
}

}  // namespace

Tensor gelu_linear(const Tensor& pre_in, const Tensor& w, const Tensor& bias, GeluApprox approx, bool weight_in_out,
                   const Tensor& act_in, bool keep_act) {
  check_floating("gelu_linear", pre_in);
  Tensor pre = contiguous(pre_in);
  LinearArgs a = prepare_linear(pre, w, bias, weight_in_out);
  const UnaryOp op = gelu_op(approx);
  if (act_in.defined())
    LT_CHECK(act_in.shape() == pre.shape() && act_in.dtype() == pre.dtype(),
             "gelu_linear: act " + shape_str(act_in.shape()) + " " + dtype_name(act_in.dtype()) + " vs pre " +
                 shape_str(pre.shape()) + " " + dtype_name(pre.dtype()),
             "act must be gelu(pre): same shape and dtype", "pass gelu(pre) or leave act undefined");
  Tensor out, kept_act;
  {
    Tensor act = act_in.defined() ? contiguous_data(act_in) : Tensor();
    if (!act.defined()) {
      OpNameScope op_name(approx == GeluApprox::Tanh ? "gelu_tanh" : "gelu_erf");
      act = gelu_of(op, pre);
    }
    out = linear_forward(a, act, bias, weight_in_out);
    if (keep_act) kept_act = act;
  }  // act is freed here unless kept: the backward recomputes it
  if (!needs_grad({pre, a.wc, bias})) return out;
  const bool need_pre = pre.requires_grad(), need_w = a.wc.requires_grad();
  const bool need_b = bias.defined() && bias.requires_grad();
  const bool act_kept = keep_act && need_w;
  SavedTensor saved_pre((need_pre || (need_w && !act_kept)) ? pre : Tensor()), saved_w(need_pre ? a.wc : Tensor());
  SavedTensor saved_act(act_kept ? kept_act : Tensor());
  const int64_t rows = a.rows, in = a.in, outf = a.outf;
  const ParamGradTargets targets = param_grad_targets(a.wc, bias);
  const DType grad_dt = targets.dtype;
  record(out, "gelu_linear", {pre, targets.w, targets.b}, [=](const Tensor& g) {
    Tensor spre = saved_pre.unpack(), sw = saved_w.unpack();
    Tensor g2 = reshape(g, {rows, outf});
    Tensor gpre, gw, gb;
    {
      Tensor act = !need_w ? Tensor() : act_kept ? saved_act.unpack() : gelu_of(op, spre);
      // act freed after the GEMM
      WeightBiasGrad wb = linear_param_grads(g2, act, rows, in, weight_in_out, need_w, need_b, grad_dt);
      gw = wb.w, gb = wb.b;
    }
    if (need_pre) gpre = gelu_input_grad(op, g2, sw, spre, weight_in_out);
    return std::vector<Tensor>{gpre, gw, gb};
  });
  return out;
}

namespace {

// layer_norm_linear, and with `act` its tanh GELU from the GEMM's epilogue (left undefined where
// the epilogue does not apply).
Tensor layer_norm_linear_impl(const Tensor& x, const Tensor& ln_w_in, const Tensor& ln_b_in, double eps,
                              const Tensor& w, const Tensor& bias, bool weight_in_out, Tensor* act) {
  const char* name = "layer_norm_linear";
  Device dev = common_device(name, {x, ln_w_in, ln_b_in, w, bias});
  check_floating(name, x);
  LT_CHECK(x.dim() >= 1 && x.size(-1) > 0, std::string(name) + ": input of shape " + shape_str(x.shape()),
           "it needs a non-empty last dimension to normalise over", "pass a tensor shaped [..., C]");
  LT_CHECK(ln_w_in.defined(), std::string(name) + ": no norm weight", "the kernels need a [C] weight",
           "pass ones([C]) for none");
  for (const Tensor* p : {&ln_w_in, &ln_b_in}) {
    if (!p->defined()) continue;
    check_same_dtype(name, x, *p);
    LT_CHECK(p->dim() == 1 && p->size(0) == x.size(-1),
             std::string(name) + ": norm weight or bias has shape " + shape_str(p->shape()),
             "it must be [" + std::to_string(x.size(-1)) + "] to match the last dim of input " + shape_str(x.shape()),
             "create it with the normalised size");
  }
  Tensor xc = contiguous(x), ln_w = contiguous(ln_w_in), ln_b = ln_b_in.defined() ? contiguous(ln_b_in) : Tensor();
  const int64_t C = x.size(-1), N = x.numel() / C;
  const DType aux = aux_dtype(x.dtype());
  const float feps = float(eps);
  Tensor mu, rstd, out;
  LinearArgs a;
  {
    Tensor y;
    {
      OpNameScope op_name("layer_norm_linear");
      y = Tensor::empty(x.shape(), x.dtype(), dev);
      mu = Tensor::empty({N}, aux, dev);
      rstd = Tensor::empty({N}, aux, dev);
      backend_for(dev).layernorm_fwd(rows_view(y), mu, rstd, rows_view(xc), ln_w, ln_b, feps);
    }
    a = prepare_linear(y, w, bias, weight_in_out);
    if (act && a.outf % 8 == 0 && gemm_gelu_enabled()) {
      LinearGelu h = linear_gelu_gemm(a, bias, weight_in_out);
      out = h.pre;
      *act = h.act;
    } else {
      out = linear_forward(a, y, bias, weight_in_out);
    }
    a.xc = Tensor();  // y is freed here: the backward recomputes it
  }
  if (!needs_grad({xc, ln_w, ln_b, a.wc, bias})) return out;
  const bool need_x = xc.requires_grad(), need_lnw = ln_w.requires_grad();
  const bool need_lnb = ln_b.defined() && ln_b.requires_grad();
  const bool need_w = a.wc.requires_grad(), need_b = bias.defined() && bias.requires_grad();
  const bool need_norm_grad = need_x || need_lnw || need_lnb;
  // y = norm(x) is needed for dW; dy = g W^T goes through the norm's backward (x, w, mean, rstd).
  const bool keep_x = need_w || need_norm_grad;
  SavedTensor saved_x(keep_x ? xc : Tensor()), saved_lnw(keep_x ? ln_w : Tensor());
  SavedTensor saved_lnb(need_w ? ln_b : Tensor());
  SavedTensor saved_mu(need_norm_grad ? mu : Tensor()), saved_rstd(need_norm_grad ? rstd : Tensor());
  SavedTensor saved_w(need_norm_grad ? a.wc : Tensor());
  const int64_t rows = a.rows, in = a.in, outf = a.outf;
  Shape xs = x.shape();
  const ParamGradTargets targets = param_grad_targets(a.wc, bias), ln_targets = param_grad_targets(ln_w, ln_b);
  const DType grad_dt = targets.dtype, ln_dt = ln_targets.dtype;
  record(out, name, {xc, ln_targets.w, ln_targets.b, targets.w, targets.b}, [=](const Tensor& g) {
    // Each saved tensor unpacked once (a pack/unpack hook may move it on every unpack).
    Tensor sx = saved_x.unpack(), slnw = saved_lnw.unpack(), slnb = saved_lnb.unpack();
    Tensor smu = saved_mu.unpack(), srstd = saved_rstd.unpack(), sw = saved_w.unpack();
    Tensor g2 = reshape(g, {rows, outf});
    Tensor gx, glnw, glnb, gw, gb;
    if (need_w) {  // y = norm(x) again, by the forward's kernel, freed after the GEMM
      OpNameScope op_name("layer_norm_linear");
      Tensor y = Tensor::empty(sx.shape(), sx.dtype(), sx.device());
      Tensor tmp_mu = Tensor::empty({N}, aux, sx.device()), tmp_rstd = Tensor::empty({N}, aux, sx.device());
      backend_of(sx).layernorm_fwd(rows_view(y), tmp_mu, tmp_rstd, rows_view(sx), slnw, slnb, feps);
      WeightBiasGrad wb = linear_param_grads(g2, y, rows, in, weight_in_out, need_w, need_b, grad_dt);
      gw = wb.w, gb = wb.b;
    } else if (need_b) {
      gb = column_sums(g2, grad_dt);
    }
    if (need_norm_grad) {
      Tensor dy = matmul(g2, sw, false, weight_in_out);  // [rows, C]
      gx = Tensor::empty(xs, g.dtype(), g.device());
      if (need_lnw) glnw = Tensor::empty({C}, ln_dt, g.device());
      if (need_lnb) glnb = Tensor::empty({C}, ln_dt, g.device());
      backend_of(g).layernorm_bwd(rows_view(gx), glnw, glnb, dy, rows_view(sx), slnw, smu, srstd);
      if (!need_x) gx = Tensor();
    }
    return std::vector<Tensor>{gx, glnw, glnb, gw, gb};
  });
  return out;
}

}  // namespace

Tensor layer_norm_linear(const Tensor& x, const Tensor& ln_w, const Tensor& ln_b, double eps, const Tensor& w,
                         const Tensor& bias, bool weight_in_out) {
  return layer_norm_linear_impl(x, ln_w, ln_b, eps, w, bias, weight_in_out, nullptr);
}

LinearGelu layer_norm_linear_gelu(const Tensor& x, const Tensor& ln_w, const Tensor& ln_b, double eps, const Tensor& w,
                                  const Tensor& bias, bool weight_in_out) {
  LinearGelu r;
  r.pre = layer_norm_linear_impl(x, ln_w, ln_b, eps, w, bias, weight_in_out, &r.act);
  return r;
}

Tensor attention_linear(const Tensor& qkv_in, int64_t heads, int64_t kv_heads, bool causal, const Tensor& mask_in,
                        const Tensor& w, const Tensor& bias, bool weight_in_out) {
  AttentionMask m;
  m.causal = causal;
  m.key_padding = mask_in;
  return attention_linear(qkv_in, heads, kv_heads, m, w, bias, weight_in_out);
}

Tensor attention_linear(const Tensor& qkv_in, int64_t heads, int64_t kv_heads, const AttentionMask& mask_in,
                        const Tensor& w, const Tensor& bias, bool weight_in_out) {
  const char* name = "attention_linear";
  LT_CHECK(active_kept_outputs() == nullptr, std::string(name) + " inside a selective checkpoint",
           "selective checkpointing keeps the attention output, which this op exists not to keep",
           "use self_attention_packed and linear there");
  const PackedAttention at = prepare_packed_attention(name, qkv_in, heads, kv_heads, mask_in, 0.0);
  const DType aux = aux_dtype(at.qkv.dtype());
  Tensor lse = Tensor::empty({at.B, at.H, at.T}, aux, at.dev);
  Tensor out;
  LinearArgs a;
  {
    Tensor o;
    {
      OpNameScope op_name("attention");
      o = Tensor::empty({at.B, at.T, at.C}, at.qkv.dtype(), at.dev);
      at.forward(o, lse, at.qkv, at.mask, at.doc_pos);
    }
    a = prepare_linear(o, w, bias, weight_in_out);
    out = linear_forward(a, o, bias, weight_in_out);
    a.xc = Tensor();  // o is freed here: the backward recomputes it
  }
  if (!needs_grad({at.qkv, a.wc, bias})) return out;
  const bool need_qkv = at.qkv.requires_grad(), need_w = a.wc.requires_grad();
  const bool need_b = bias.defined() && bias.requires_grad();
  SavedTensor saved_qkv((need_qkv || need_w) ? at.qkv : Tensor()), saved_mask(at.mask), saved_doc(at.doc_pos);
  SavedTensor saved_lse(need_qkv ? lse : Tensor()), saved_w(need_qkv ? a.wc : Tensor());
  lse = Tensor();
  PackedAttention shape_only = at;  // the backward reads the saved tensors, not these
  shape_only.qkv = shape_only.mask = shape_only.doc_pos = Tensor();
  const int64_t rows = a.rows, in = a.in, outf = a.outf;
  const ParamGradTargets targets = param_grad_targets(a.wc, bias);
  const DType grad_dt = targets.dtype;
  record(out, name, {at.qkv, targets.w, targets.b}, [=](const Tensor& g) {
    Tensor sqkv = saved_qkv.unpack(), smask = saved_mask.unpack(), slse = saved_lse.unpack(), sw = saved_w.unpack();
    Tensor sdoc = saved_doc.unpack();
    Tensor g2 = reshape(g, {rows, outf});
    Tensor o;
    if (need_w || need_qkv) {  // the forward's kernel on the same inputs: the same bits as the forward's output
      OpNameScope op_name("attention_linear");
      o = Tensor::empty({shape_only.B, shape_only.T, shape_only.C}, sqkv.dtype(), sqkv.device());
      Tensor tmp_lse = Tensor::empty({shape_only.B, shape_only.H, shape_only.T}, aux, sqkv.device());
      shape_only.forward(o, tmp_lse, sqkv, smask, sdoc);
    }
    Tensor gqkv, gw, gb;
    {
      WeightBiasGrad wb = linear_param_grads(g2, o, rows, in, weight_in_out, need_w, need_b, grad_dt);
      gw = wb.w, gb = wb.b;
    }
    if (need_qkv) {
      Tensor go = reshape(matmul(g2, sw, false, weight_in_out), {shape_only.B, shape_only.T, shape_only.C});
      gqkv = shape_only.backward(go, sqkv, o, slse, smask, sdoc);
    }
    return std::vector<Tensor>{gqkv, gw, gb};
  });
  return out;
}

}  // namespace lt
