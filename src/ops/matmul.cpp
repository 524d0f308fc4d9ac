#include <string>

#include "autograd/kept_outputs.h"
#include "core/knobs.h"
#include "ops/linear_args.h"

namespace lt {
using namespace detail;

namespace {

// Batch dims of a [..., r, c] tensor.
Shape batch_of(const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 2); }

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in, bool trans_a, bool trans_b) {
  Device dev = common_device("matmul", {a_in, b_in});
  check_same_dtype("matmul", a_in, b_in);
  check_floating("matmul", a_in);
  LT_CHECK(a_in.dim() >= 2 && b_in.dim() >= 2, "matmul: operands need at least 2 dimensions",
           "got " + shape_str(a_in.shape()) + " and " + shape_str(b_in.shape()), "reshape them");
  const int64_t m = trans_a ? a_in.size(-1) : a_in.size(-2);
  const int64_t ka = trans_a ? a_in.size(-2) : a_in.size(-1);
  const int64_t kb = trans_b ? b_in.size(-1) : b_in.size(-2);
  const int64_t n = trans_b ? b_in.size(-2) : b_in.size(-1);
  LT_CHECK(ka == kb, "matmul: inner dimensions differ",
           shape_str(a_in.shape()) + (trans_a ? "^T" : "") + " @ " + shape_str(b_in.shape()) + (trans_b ? "^T" : ""),
           "make the contracted dimensions equal");
  Shape batch = broadcast_shapes("matmul", batch_of(a_in), batch_of(b_in));
  const int64_t nb = numel(batch);
  // Operands are made contiguous unless they come in padded rows (a padded linear's gradient),
  // which the GEMM reads in place; a broadcast operand (whole batch from one matrix) keeps stride 0.
  Tensor a = padded_rows(a_in) ? a_in : contiguous(a_in);
  Tensor b = padded_rows(b_in) ? b_in : contiguous(b_in);
  const int64_t lda = padded_rows(a), ldb = padded_rows(b);
  const bool a_bcast = numel(batch_of(a)) == 1 && nb > 1;
  const bool b_bcast = numel(batch_of(b)) == 1 && nb > 1;
  LT_CHECK((a_bcast || batch_of(a) == batch || numel(batch_of(a)) == nb) &&
               (b_bcast || batch_of(b) == batch || numel(batch_of(b)) == nb),
           "matmul: partial batch broadcasting is not supported",
           shape_str(a_in.shape()) + " @ " + shape_str(b_in.shape()), "expand the operands to one batch shape");
  Shape out_shape = batch;
  out_shape.push_back(m);
  out_shape.push_back(n);
  // Selective checkpointing's recomputation takes the forward's result instead (kept_outputs.h).
  bool fresh = true;
  Tensor out = kept_or_empty("matmul", out_shape, a.dtype(), dev, fresh);
  if (fresh) {
    GemmDesc d;
    d.batch = nb;
    d.m = m;
    d.n = n;
    d.k = ka;
    d.trans_a = trans_a;
    d.trans_b = trans_b;
    d.lda = lda;
    d.ldb = ldb;
    d.stride_a = a_bcast ? 0 : a.size(-2) * lda;
    d.stride_b = b_bcast ? 0 : b.size(-2) * ldb;
    d.stride_c = m * n;
    backend_for(dev).gemm(out, a, b, d, Tensor());
    keep_outputs("matmul", {out});
  }
  if (!needs_grad({a, b})) return out;
  const bool need_a = a.requires_grad(), need_b = b.requires_grad();
  SavedTensor saved_a(need_b ? a : Tensor());
  SavedTensor saved_b(need_a ? b : Tensor());
  Shape as = a.shape(), bs = b.shape();
  record(out, "matmul", {a, b}, [=](const Tensor& g) {
    Tensor sa = saved_a.unpack(), sb = saved_b.unpack();
    Tensor ga, gb;
    // C = op(A) op(B): dA = dC op(B)^T (transposed back if A was), dB likewise.
    if (need_a) ga = trans_a ? matmul(sb, g, trans_b, true) : matmul(g, sb, false, !trans_b);
    if (need_b) gb = trans_b ? matmul(g, sa, true, trans_a) : matmul(sa, g, !trans_a, false);
    if (ga.defined() && ga.shape() != as) ga = sum_to(ga, as);
    if (gb.defined() && gb.shape() != bs) gb = sum_to(gb, bs);
    return std::vector<Tensor>{ga, gb};
  });
  return out;
}

// The fusion switches below are on unless set to 0 (to time a fused epilogue against the kernels
// it replaces), the same for every device.

// LEANTRAIN_GEMM_GELU=0 sends linear_gelu back to linear then gelu, and the GELU epilogues of
// the recompute linears back to their two kernels.
bool detail::gemm_gelu_enabled() {
  static const bool on = knob_on("LEANTRAIN_GEMM_GELU");
  return on;
}

namespace {

// LEANTRAIN_GEMM_BGRAD=0 sends weight_bias_grad back to matmul then sum_to.
bool gemm_bgrad_on() {
  static const bool on = knob_on("LEANTRAIN_GEMM_BGRAD");
  return on;
}

// dW = x2^T g2 ([in, out] weights) or g2^T x2 ([out, in]) as one GEMM over the rows (k).
GemmDesc weight_grad_desc(int64_t rows, int64_t in, int64_t outf, bool weight_in_out) {
  GemmDesc d;
  d.k = rows;
  d.trans_a = true;
  d.m = weight_in_out ? in : outf;
  d.n = weight_in_out ? outf : in;
  return d;
}

// dW (and db) of 16-bit operands into f32 outputs without the bias epilogue: the GEMM and a
// column sum, each writing f32 (the backends' gemm and reduce_sum take 16-bit into f32). The
// GEMM reads padded rows in place (GPT-2's head: a copy of its logits' gradient is 1.6 GB).
detail::WeightBiasGrad widened_weight_bias_grad(const Tensor& g2_in, const Tensor& x2_in, bool weight_in_out,
                                                bool need_w, bool need_b) {
  detail::WeightBiasGrad r;
  const int64_t rows = g2_in.size(0), outf = g2_in.size(1);
  if (need_w) {
    const Tensor g2 = padded_rows(g2_in) ? g2_in : contiguous(g2_in);
    const Tensor x2 = padded_rows(x2_in) ? x2_in : contiguous(x2_in);
    GemmDesc d = weight_grad_desc(rows, x2.size(1), outf, weight_in_out);
    d.lda = padded_rows(weight_in_out ? x2 : g2);
    d.ldb = padded_rows(weight_in_out ? g2 : x2);
    r.w = Tensor::empty({d.m, d.n}, DType::F32, g2.device());
    if (weight_in_out) backend_of(g2).gemm(r.w, x2, g2, d, Tensor());
    else backend_of(g2).gemm(r.w, g2, x2, d, Tensor());
  }
  if (need_b) r.b = column_sums(g2_in, DType::F32);
  return r;
}

}  // namespace

detail::WeightBiasGrad detail::weight_bias_grad(const Tensor& g2, const Tensor& x2, bool weight_in_out, bool need_w,
                                                bool need_b, std::optional<DType> dtype) {
  WeightBiasGrad r;
  const DType dt = dtype.value_or(g2.dtype());
  const bool fused = need_w && need_b && gemm_bgrad_on() && g2.is_contiguous() && x2.is_contiguous() &&
                     g2.dtype() == x2.dtype() && g2.dim() == 2 && x2.dim() == 2 && g2.size(0) == x2.size(0);
  if (!fused && dt != g2.dtype()) return widened_weight_bias_grad(g2, x2, weight_in_out, need_w, need_b);
  if (!fused) {
    if (need_w)
      r.w = weight_in_out ? matmul(x2, g2, true, false)    // [in,rows] @ [rows,out]
                          : matmul(g2, x2, true, false);   // [out,rows] @ [rows,in]
    if (need_b) r.b = sum_to(g2, {g2.size(1)});
    return r;
  }
  const int64_t outf = g2.size(1);
  const GemmDesc d = weight_grad_desc(g2.size(0), x2.size(1), outf, weight_in_out);
  r.w = Tensor::empty({d.m, d.n}, dt, g2.device());
  r.b = Tensor::empty({outf}, dt, g2.device());
  // [in, out] weights: a = x2, b = g2, db sums b; [out, in]: a = g2, b = x2, db sums a.
  if (weight_in_out) backend_of(g2).gemm_bgrad(r.w, r.b, x2, g2, d, true);
  else backend_of(g2).gemm_bgrad(r.w, r.b, g2, x2, d, false);
  return r;
}

LinearArgs detail::prepare_linear(const Tensor& x, const Tensor& w, const Tensor& bias, bool weight_in_out) {
  LinearArgs a;
  a.dev = common_device("linear", {x, w, bias});
  check_same_dtype("linear", x, w);
  check_rank("linear", w, 2, "weight");
  a.in = weight_in_out ? w.size(0) : w.size(1);
  a.outf = weight_in_out ? w.size(1) : w.size(0);
  LT_CHECK(x.dim() >= 1 && x.size(-1) == a.in, "linear: input features differ from the weight's",
           "input " + shape_str(x.shape()) + ", weight " + shape_str(w.shape()) +
               (weight_in_out ? " ([in, out])" : " ([out, in])"),
           "match in_features");
  if (bias.defined()) {
    check_same_dtype("linear", x, bias);
    LT_CHECK(bias.dim() == 1 && bias.size(0) == a.outf, "linear: bias shape " + shape_str(bias.shape()),
             "expected [" + std::to_string(a.outf) + "]", "match out_features");
  }
  a.xc = padded_rows(x) ? x : contiguous(x);  // padded rows are read in place
  a.wc = contiguous(w);
  a.rows = a.xc.numel() / a.in;
  a.out_shape = x.shape();
  a.out_shape.back() = a.outf;
  return a;
}

// x @ W (+ b) as one GEMM, the output in rows of ldc.
GemmDesc detail::LinearArgs::desc(int64_t ldc) const {
  GemmDesc d;
  d.m = rows;
  d.n = outf;
  d.k = in;
  d.lda = padded_rows(xc);
  d.ldc = ldc;
  return d;
}

// Records out's backward: dX = dY W^T, dW, db = column sums of dY (each only when needed).
void detail::record_linear(Tensor& out, const LinearArgs& a, const Tensor& bias, bool weight_in_out, const Shape& xs) {
  if (!needs_grad({a.xc, a.wc, bias})) return;
  const bool need_x = a.xc.requires_grad(), need_w = a.wc.requires_grad();
  const bool need_b = bias.defined() && bias.requires_grad();
  SavedTensor saved_x(need_w ? a.xc : Tensor());
  SavedTensor saved_w(need_x ? a.wc : Tensor());
  const int64_t rows = a.rows, in = a.in, outf = a.outf;
  const ParamGradTargets targets = param_grad_targets(a.wc, bias);
  const DType grad_dt = targets.dtype;
  record(out, "linear", {a.xc, targets.w, targets.b}, [=](const Tensor& g) {
    Tensor sx = saved_x.unpack(), sw = saved_w.unpack();
    Tensor g2 = reshape(g, {rows, outf});
    Tensor gx, gw, gb;
    if (need_x) gx = reshape(matmul(g2, sw, false, weight_in_out), xs);  // [rows,out] @ W^T
    WeightBiasGrad wb = weight_bias_grad(g2, need_w ? reshape(sx, {rows, in}) : Tensor(), weight_in_out, need_w, need_b,
                                         grad_dt);
    return std::vector<Tensor>{gx, wb.w, wb.b};
  });
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias, bool weight_in_out) {
  OpNameScope op_name("linear");
  LinearArgs a = prepare_linear(x, w, bias, weight_in_out);
  // A wide output of an odd width gets padded rows (padded_row_stride, op_common.h).
  const int64_t ldc = padded_row_stride(a.outf, x.dtype());
  // Selective checkpointing's recomputation hands the forward's result back (kept_outputs.h).
  std::vector<Tensor> kept = take_kept_outputs("linear", {a.out_shape}, {x.dtype()});
  const bool fresh = kept.empty();
  Tensor out = fresh ? empty_rows(a.out_shape, ldc, x.dtype(), a.dev) : kept[0];
  if (fresh) {
    GemmDesc d = a.desc(ldc);
    d.trans_b = !weight_in_out;
    backend_for(a.dev).gemm(out, a.xc, a.wc, d, bias);
    keep_outputs("linear", {out});
  }
  record_linear(out, a, bias, weight_in_out, x.shape());
  return out;
}

LinearGelu detail::linear_gelu_gemm(const LinearArgs& a, const Tensor& bias, bool weight_in_out) {
  const DType dt = a.xc.dtype();
  LinearGelu r;
  bool fresh = true;
  {
    OpNameScope op_name("linear");
    // Selective checkpointing's recomputation hands the forward's pre-activation back.
    std::vector<Tensor> kept = take_kept_outputs("linear", {a.out_shape}, {dt});
    fresh = kept.empty();
    r.pre = fresh ? Tensor::empty(a.out_shape, dt, a.dev) : kept[0];
  }
  // The same two allocations, in the same order, as linear then gelu.
  r.act = Tensor::empty(a.out_shape, dt, a.dev);
  if (fresh) {
    GemmDesc d = a.desc(0);
    d.trans_b = !weight_in_out;
    backend_for(a.dev).gemm_gelu(r.act, r.pre, a.xc, a.wc, d, bias);
    keep_outputs("linear", {r.pre});
  } else {  // the GELU of the kept pre-activation, as gelu() computes it
    backend_for(a.dev).unary(UnaryOp::GeluTanh, r.act, r.pre, 0.f);
  }
  return r;
}

LinearGelu linear_gelu_parts(const Tensor& x, const Tensor& w, const Tensor& bias, GeluApprox approx,
                             bool weight_in_out) {
  const UnaryOp op = approx == GeluApprox::Tanh ? UnaryOp::GeluTanh : UnaryOp::GeluErf;
  const int64_t outf = w.dim() == 2 ? (weight_in_out ? w.size(1) : w.size(0)) : 0;
  // The epilogue computes the tanh GELU and writes rows of a multiple of 8 (16 bytes of 16-bit):
  // anything else runs the linear, then the GELU kernel on its output.
  if (approx != GeluApprox::Tanh || outf % 8 != 0 || !gemm_gelu_enabled()) {
    LinearGelu r;
    r.pre = linear(x, w, bias, weight_in_out);
    Tensor pc = contiguous_data(r.pre);
    r.act = Tensor::empty(pc.shape(), pc.dtype(), pc.device());
    backend_of(pc).unary(op, r.act, pc, 0.f);
    return r;
  }
  LinearArgs a;
  {
    OpNameScope op_name("linear");
    a = prepare_linear(x, w, bias, weight_in_out);
  }
  LinearGelu r = linear_gelu_gemm(a, bias, weight_in_out);
  record_linear(r.pre, a, bias, weight_in_out, x.shape());
  return r;
}

Tensor linear_gelu(const Tensor& x, const Tensor& w, const Tensor& bias, bool weight_in_out) {
  const int64_t outf = w.dim() == 2 ? (weight_in_out ? w.size(1) : w.size(0)) : 0;
  if (outf % 8 != 0 || !gemm_gelu_enabled()) return gelu(linear(x, w, bias, weight_in_out), GeluApprox::Tanh);
  // The graph of linear then gelu: two nodes, the same saved tensors, the same backward.
  LinearGelu r = linear_gelu_parts(x, w, bias, GeluApprox::Tanh, weight_in_out);
  record_unary(UnaryOp::GeluTanh, "gelu_tanh", r.act, r.pre, 0.f);
  return r.act;
}

}  // namespace lt
