// lora_linear (leantrain/ops_lora.h): a linear layer and its LoRA adapters as one recorded op.
// Forward: the base GEMM into y (linear's layout, padded rows included), then per adapter
// t_i = x a_i^T [rows, r] and y[:, c_i ..] += s_i t_i b_i^T (alpha s_i, beta 1: rounded once).
// Backward from g: dx = g W + sum_i u_i a_i with u_i = s_i g[:, c_i ..] b_i (each u_i a_i added by
// a beta-1 GEMM), db_i = s_i g_i^T t_i, da_i = u_i^T x, and W's and the bias's gradients as
// linear computes them when they are trainable. Saved: x (for the a_i's gradients), each t_i,
// and the weights; the composition saved the same x, each s_i t_i, and the same weights.
#include "autograd/kept_outputs.h"
#include "leantrain/ops_lora.h"
#include "ops/linear_args.h"

namespace lt {
using namespace detail;

namespace {

// The layer as linear, scale, concat and add (a selective checkpoint keeps and replays the
// linears' results, in the order these calls make them).
Tensor composed(const Tensor& x, const Tensor& w, const Tensor& bias, const std::vector<LoraFactors>& adapters) {
  Tensor y = linear(x, w, bias);
  std::vector<Tensor> updates;
  for (const LoraFactors& f : adapters) updates.push_back(linear(scale(linear(x, f.a, Tensor()), float(f.scaling)), f.b, Tensor()));
  return add(y, updates.size() == 1 ? updates[0] : concat(updates, -1));
}

// [rows, cols] at column c0 of a matrix in rows of ld (a view, no copy).
Tensor columns(const Tensor& m, int64_t rows, int64_t c0, int64_t cols, int64_t ld) {
  return make_view(m, {rows, cols}, {ld, 1}, m.offset() + c0);
}

void check_adapters(const LinearArgs& a, const Tensor& x, const std::vector<LoraFactors>& adapters) {
  LT_CHECK(!adapters.empty(), "lora_linear: no adapter", "it adds at least one adapter to the layer",
           "call linear for a layer without adapters");
  int64_t cols = 0;
  for (const LoraFactors& f : adapters) {
    LT_CHECK(f.a.defined() && f.b.defined() && f.a.dim() == 2 && f.b.dim() == 2 && f.a.size(1) == a.in &&
                 f.b.size(1) == f.a.size(0) && f.a.size(0) >= 1,
             "lora_linear: adapter factors " + (f.a.defined() ? shape_str(f.a.shape()) : std::string("none")) + " and " +
                 (f.b.defined() ? shape_str(f.b.shape()) : std::string("none")),
             "a [r, " + std::to_string(a.in) + "] and b [out_i, r]", "pass the adapter's lora_A and lora_B weights");
    check_same_dtype("lora_linear", x, f.a);
    check_same_dtype("lora_linear", x, f.b);
    LT_CHECK(f.a.device() == a.dev && f.b.device() == a.dev, "lora_linear: adapter factors on another device",
             "every operand lives on the input's device", "move the adapter with its layer");
    cols += f.b.size(0);
  }
  LT_CHECK(cols == a.outf, "lora_linear: adapters over " + std::to_string(cols) + " output columns",
           "they cover the layer's " + std::to_string(a.outf) + " in order", "give one adapter per stacked projection");
}

}  // namespace

Tensor lora_linear(const Tensor& x, const Tensor& w, const Tensor& bias, const std::vector<LoraFactors>& adapters) {
  if (active_kept_outputs() != nullptr) return composed(x, w, bias, adapters);
  OpNameScope op("lora_linear");
  const LinearArgs a = prepare_linear(x, w, bias, false);
  check_adapters(a, x, adapters);
  const DType dt = x.dtype();
  const int64_t rows = a.rows, in = a.in, outf = a.outf, ldc = padded_row_stride(outf, dt), ldx = padded_rows(a.xc);
  Backend& be = backend_for(a.dev);
  Tensor out = empty_rows(a.out_shape, ldc, dt, a.dev);
  {
    GemmDesc d = a.desc(ldc);
    d.trans_b = true;
    be.gemm(out, a.xc, a.wc, d, bias);
  }
  struct Adapter {
    Tensor a, b, t;
    float s;
    int64_t c0, cols, r;
  };
  std::vector<Adapter> ads;
  int64_t c0 = 0;
  for (const LoraFactors& f : adapters) {
    Adapter ad{contiguous(f.a), contiguous(f.b), Tensor(), float(f.scaling), c0, f.b.size(0), f.a.size(0)};
    ad.t = Tensor::empty({rows, ad.r}, dt, a.dev);
    GemmDesc dt_desc;  // t = x a^T
    dt_desc.m = rows, dt_desc.n = ad.r, dt_desc.k = in, dt_desc.trans_b = true, dt_desc.lda = ldx;
    be.gemm(ad.t, a.xc, ad.a, dt_desc, Tensor());
    GemmDesc du;  // y[:, c0 ..] += s t b^T
    du.m = rows, du.n = ad.cols, du.k = ad.r, du.trans_b = true, du.ldc = ldc, du.alpha = ad.s, du.beta = 1.0f;
    be.gemm(columns(out, rows, c0, ad.cols, ldc), ad.t, ad.b, du, Tensor());
    c0 += ad.cols;
    ads.push_back(std::move(ad));
  }
  std::vector<Tensor> ins{a.xc, a.wc, bias};
  for (const Adapter& ad : ads) ins.push_back(ad.a), ins.push_back(ad.b);
  if (!needs_grad(ins)) return out;
  const bool need_x = a.xc.requires_grad(), need_w = a.wc.requires_grad(), need_b = bias.defined() && bias.requires_grad();
  bool need_a = false;
  for (const Adapter& ad : ads) need_a = need_a || ad.a.requires_grad();
  SavedTensor saved_x(need_w || need_a ? a.xc : Tensor()), saved_w(need_x ? a.wc : Tensor());
  struct SavedAdapter {
    SavedTensor a, b, t;
    float s;
    int64_t c0, cols, r;
    bool need_a, need_b;
    DType a_dt, b_dt;
  };
  std::vector<SavedAdapter> saved;
  std::vector<Tensor> targets{a.xc};
  const ParamGradTargets tw = param_grad_targets(a.wc, bias);
  targets.push_back(tw.w);
  targets.push_back(tw.b);
  for (const Adapter& ad : ads) {
    const ParamGradTargets ta = param_grad_targets(ad.a, Tensor()), tb = param_grad_targets(ad.b, Tensor());
    const bool na = ad.a.requires_grad(), nb = ad.b.requires_grad();
    saved.push_back(SavedAdapter{SavedTensor(need_x ? ad.a : Tensor()), SavedTensor(ad.b), SavedTensor(nb ? ad.t : Tensor()),
                                 ad.s, ad.c0, ad.cols, ad.r, na, nb, ta.dtype, tb.dtype});
    targets.push_back(ta.w);
    targets.push_back(tb.w);
  }
  const Shape xs = x.shape();
  const DType w_dt = tw.dtype;
  record(out, "lora_linear", targets, [=](const Tensor& g) {
    Backend& bb = backend_of(g);
    Tensor g2 = reshape(g, {rows, outf});
    if (padded_rows(g2) == 0) g2 = contiguous(g2);
    const int64_t ldg = padded_rows(g2);
    Tensor sx = saved_x.unpack(), sw = saved_w.unpack();
    Tensor x2 = need_w || need_a ? reshape(sx, {rows, in}) : Tensor();
    if (x2.defined() && padded_rows(x2) == 0) x2 = contiguous(x2);
    Tensor gx = need_x ? matmul(g2, sw, false, false) : Tensor();  // [rows, out] @ W
    std::vector<Tensor> grads{Tensor(), Tensor(), Tensor()};
    for (const SavedAdapter& sa : saved) {
      const Tensor gi = columns(g2, rows, sa.c0, sa.cols, ldg), sb = sa.b.unpack();
      Tensor da, db;
      if (sa.need_b) {  // s g_i^T t
        db = Tensor::empty({sa.cols, sa.r}, sa.b_dt, g.device());
        GemmDesc d;
        d.m = sa.cols, d.n = sa.r, d.k = rows, d.trans_a = true, d.lda = ldg, d.alpha = sa.s;
        bb.gemm(db, gi, sa.t.unpack(), d, Tensor());
      }
      if (need_x || sa.need_a) {
        Tensor u = Tensor::empty({rows, sa.r}, g.dtype(), g.device());  // s g_i b
        GemmDesc du;
        du.m = rows, du.n = sa.r, du.k = sa.cols, du.lda = ldg, du.alpha = sa.s;
        bb.gemm(u, gi, sb, du, Tensor());
        if (sa.need_a) {  // u^T x
          da = Tensor::empty({sa.r, in}, sa.a_dt, g.device());
          GemmDesc d;
          d.m = sa.r, d.n = in, d.k = rows, d.trans_a = true, d.ldb = padded_rows(x2);
          bb.gemm(da, u, x2, d, Tensor());
        }
        if (need_x) {  // dx += u a
          GemmDesc d;
          d.m = rows, d.n = in, d.k = sa.r, d.beta = 1.0f;
          bb.gemm(gx, u, sa.a.unpack(), d, Tensor());
        }
      }
      grads.push_back(da);
      grads.push_back(db);
    }
    if (need_x) grads[0] = reshape(gx, xs);
    const WeightBiasGrad wb = weight_bias_grad(g2, need_w ? x2 : Tensor(), false, need_w, need_b, w_dt);
    grads[1] = wb.w;
    grads[2] = wb.b;
    return grads;
  });
  return out;
}

}  // namespace lt
