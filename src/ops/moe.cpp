// Mixture-of-experts front-ends: the router (softmax, top-k, renormalisation) and its share of
// the load-balancing loss, the dispatch (a stable sort of the routed slots by expert), the
// gather of each slot's token row, the experts as grouped GEMMs over the sorted rows, and the
// weighted combine. Every buffer has a size fixed by N, k and E alone (R = N * k rows, whatever
// the split between experts), so a dry run allocates exactly what a GPU run does: the
// data-dependent split only moves row boundaries inside the buffers (docs/memory-model.md).
#include "leantrain/checkpoint.h"
#include "leantrain/ops_moe.h"
#include "backend/moe_kernels.h"
#include "core/knobs.h"
#include "ops/op_common.h"
#include "quant/nf4.h"

namespace lt {
using namespace detail;

namespace {

void check_dispatch(const char* op, const Tensor& rows, const MoeDispatch& d) {
  LT_CHECK(d.offsets.defined() && rows.dim() == 2 && rows.size(0) == d.tokens * d.k,
           std::string(op) + ": " + std::to_string(rows.dim() == 2 ? rows.size(0) : -1) + " rows",
           "the dispatch routes " + std::to_string(d.tokens * d.k) + " (tokens x k)",
           "pass the rows moe_gather made from this dispatch");
}

// Adds this layer's sums to the forward's load-balancing loss (not in a recomputation: the
// forward added them once).
void add_route_stats(MoeAuxLoss& aux, const Tensor& probs, const Tensor& idx) {
  if (recomputing_checkpoint()) return;
  NoGradGuard no_grad;
  const int64_t n = probs.size(0), e = probs.size(1);
  LT_CHECK(aux.experts == e, "moe_route: " + std::to_string(e) + " experts",
           "the load-balancing loss was set up for " + std::to_string(aux.experts), "use one expert count per model");
  const DType pdt = probs.dtype();
  if (!aux.psum.defined()) {
    aux.psum = zeros({e}, pdt, probs.device());
    aux.counts = zeros({e}, pdt, probs.device());
    aux.tokens = zeros({1}, pdt, probs.device());
  }
  if (aux.token_mask.defined())
    LT_CHECK(aux.token_mask.numel() == n, "moe_route: a token mask of " + std::to_string(aux.token_mask.numel()),
             "the router sees " + std::to_string(n) + " tokens", "pass one mask entry per token");
  moe_kernels_for(probs.device()).moe_route_stats(aux.psum, aux.counts, probs, idx, aux.token_mask);
  Tensor real = aux.token_mask.defined() ? reshape(sum_all(cast(aux.token_mask, pdt)), {1})
                                         : full({1}, double(n), pdt, probs.device());
  add_(aux.tokens, real);
}

}  // namespace

MoeRoute moe_route(const Tensor& logits_in, int64_t k, bool renorm, DType weights_dtype,
                   const std::shared_ptr<MoeAuxLoss>& aux) {
  const char* name = "moe_route";
  OpNameScope op(name);
  check_floating(name, logits_in);
  check_rank(name, logits_in, 2, "logits [tokens, experts]");
  const int64_t n = logits_in.size(0), e = logits_in.size(1);
  LT_CHECK(k >= 1 && k <= e, std::string(name) + ": top " + std::to_string(k) + " of " + std::to_string(e) + " experts",
           "a token is routed to between 1 and all experts", "set num_experts_per_tok within that range");
  Tensor logits = contiguous(logits_in);
  const DType pdt = aux_dtype(logits.dtype());
  if (logits.dtype() == DType::F64) weights_dtype = DType::F64;  // gradchecks stay in f64
  const Device dev = logits.device();
  Tensor probs = Tensor::empty({n, e}, pdt, dev);
  MoeRoute r{Tensor::empty({n, k}, weights_dtype, dev), Tensor::empty({n, k}, DType::I32, dev)};
  moe_kernels_for(dev).moe_route_fwd(r.weights, r.idx, probs, logits, renorm);
  if (aux) add_route_stats(*aux, probs, r.idx);
  if (!needs_grad({logits})) return r;
  SavedTensor saved_probs(probs), saved_idx(r.idx);
  const Shape zs = logits.shape();
  const DType zdt = logits.dtype();
  record(r.weights, name, {logits}, [=](const Tensor& g) {
    Tensor p = saved_probs.unpack(), ix = saved_idx.unpack(), gc = contiguous_data(g);
    Tensor dz = Tensor::empty(zs, zdt, g.device());
    moe_kernels_for(g.device()).moe_route_bwd(dz, gc, p, ix, renorm, aux ? aux->aux_grad : Tensor(),
                                aux ? aux->token_mask : Tensor());
    return std::vector<Tensor>{dz};
  });
  return r;
}

Tensor moe_add_aux_loss(const Tensor& loss, const std::shared_ptr<MoeAuxLoss>& aux) {
  if (!aux || !aux->psum.defined() || aux->coef == 0.0) return loss;
  OpNameScope op("moe_aux_loss");
  LT_CHECK(loss.numel() == 1, "moe_add_aux_loss: a loss of shape " + shape_str(loss.shape()),
           "the load-balancing loss is added to a scalar loss", "reduce the loss first");
  const double c = aux->coef * double(aux->experts);
  Tensor out;
  {
    NoGradGuard no_grad;
    // coef * E * sum_e (counts_e / T) (psum_e / T)
    // (c as a tensor of the sums' dtype: scale() takes an f32 factor, which f64 gradchecks would see)
    Tensor t2 = mul(aux->tokens, aux->tokens);
    Tensor value = mul(div(reshape(sum_all(mul(aux->counts, aux->psum)), {1}), t2),
                       full({1}, c, aux->counts.dtype(), aux->counts.device()));
    out = add(loss, reshape(cast(value, loss.dtype()), loss.shape()));
  }
  if (!needs_grad({loss})) return out;
  record(out, "moe_aux_loss", {loss}, [aux, c](const Tensor& g) {
    NoGradGuard no_grad;
    // d(total)/d(p[n, e]) = g * coef * E * counts_e / T^2, the same for every (counted) token.
    Tensor gs = reshape(cast(g, aux->counts.dtype()), {1});
    aux->aux_grad = mul(div(mul(aux->counts, gs), mul(aux->tokens, aux->tokens)),
                        full({1}, c, aux->counts.dtype(), aux->counts.device()));
    return std::vector<Tensor>{g};
  });
  return out;
}

MoeDispatch moe_dispatch(const Tensor& idx_in, int64_t experts) {
  const char* name = "moe_dispatch";
  OpNameScope op(name);
  check_rank(name, idx_in, 2, "expert indices [tokens, k]");
  LT_CHECK(idx_in.dtype() == DType::I32 && experts > 0,
           std::string(name) + ": indices of dtype " + dtype_name(idx_in.dtype()) + ", " + std::to_string(experts) +
               " experts",
           "the router's i32 indices and a positive expert count", "pass moe_route's idx");
  Tensor idx = contiguous(idx_in);
  const Device dev = idx.device();
  MoeDispatch d;
  d.tokens = idx.size(0), d.k = idx.size(1), d.experts = experts;
  const int64_t r = idx.numel();
  d.offsets = Tensor::empty({experts + 1}, DType::I32, dev);
  d.rows = Tensor::empty({r}, DType::I32, dev);
  d.pos = Tensor::empty({r}, DType::I32, dev);
  moe_kernels_for(dev).moe_sort(d.offsets, d.rows, d.pos, idx);
  return d;
}

Tensor moe_gather(const Tensor& x_in, const MoeDispatch& d) {
  const char* name = "moe_gather";
  OpNameScope op(name);
  check_rank(name, x_in, 2, "x [tokens, C]");
  LT_CHECK(x_in.size(0) == d.tokens, std::string(name) + ": " + std::to_string(x_in.size(0)) + " tokens",
           "the dispatch routes " + std::to_string(d.tokens), "gather the rows the router saw");
  Tensor x = contiguous(x_in);
  const int64_t c = x.size(1);
  Tensor out = Tensor::empty({d.tokens * d.k, c}, x.dtype(), x.device());
  moe_kernels_for(x.device()).moe_gather(out, x, d.rows, d.k);
  if (!needs_grad({x})) return out;
  const Tensor pos = d.pos;
  const int64_t n = d.tokens, k = d.k;
  record(out, name, {x}, [pos, n, k, c](const Tensor& g) {
    Tensor gc = contiguous_data(g);
    Tensor dx = Tensor::empty({n, c}, g.dtype(), g.device());
    moe_kernels_for(g.device()).moe_gather_bwd(dx, gc, pos, k);
    return std::vector<Tensor>{dx};
  });
  return out;
}

Tensor grouped_linear(const Tensor& xs_in, const Tensor& w_in, const MoeDispatch& d, bool w_in_out) {
  const char* name = "grouped_linear";
  OpNameScope op(name);
  Device dev = common_device(name, {xs_in, w_in});
  check_floating(name, xs_in);
  check_same_dtype(name, xs_in, w_in);
  check_rank(name, w_in, 3, "weight [experts, out, in]");
  check_dispatch(name, xs_in, d);
  const int64_t in = w_in_out ? w_in.size(1) : w_in.size(2), outf = w_in_out ? w_in.size(2) : w_in.size(1);
  LT_CHECK(w_in.size(0) == d.experts && xs_in.size(1) == in,
           std::string(name) + ": rows " + shape_str(xs_in.shape()) + ", weight " + shape_str(w_in.shape()),
           "one weight per expert (" + std::to_string(d.experts) + "), its input features the rows' width",
           "pass the experts' stacked weights");
  Tensor xs = contiguous(xs_in), w = contiguous(w_in);
  Tensor y = Tensor::empty({xs.size(0), outf}, xs.dtype(), dev);
  moe_kernels_for(dev).grouped_gemm(y, xs, w, !w_in_out, d.offsets, 1.0f, false);
  if (!needs_grad({xs, w})) return y;
  const bool need_x = xs.requires_grad(), need_w = w.requires_grad();
  SavedTensor saved_x(need_w ? xs : Tensor()), saved_w(need_x ? w : Tensor());
  const ParamGradTargets targets = param_grad_targets(w, Tensor());
  const DType grad_dt = targets.dtype;
  const Tensor offsets = d.offsets;
  const Shape ws = w.shape();
  const int64_t rows = xs.size(0);
  record(y, name, {xs, targets.w}, [=](const Tensor& g) {
    Tensor gc = contiguous_data(g), sx = saved_x.unpack(), sw = saved_w.unpack();
    Tensor gx, gw;
    if (need_w) {
      gw = Tensor::empty(ws, grad_dt, g.device());
      if (w_in_out) moe_kernels_for(g.device()).grouped_gemm_wgrad(gw, sx, gc, offsets, 1.0f);
      else moe_kernels_for(g.device()).grouped_gemm_wgrad(gw, gc, sx, offsets, 1.0f);
    }
    if (need_x) {
      gx = Tensor::empty({rows, in}, g.dtype(), g.device());
      moe_kernels_for(g.device()).grouped_gemm(gx, gc, sw, w_in_out, offsets, 1.0f, false);
    }
    return std::vector<Tensor>{gx, gw};
  });
  return y;
}

Tensor grouped_swiglu_linear(const Tensor& gate_up_in, const Tensor& w_in, const MoeDispatch& d, GateAct act) {
  const bool gelu = act == GateAct::GeluTanh;
  const char* name = "grouped_swiglu_linear";
  OpNameScope op(name);
  Device dev = common_device(name, {gate_up_in, w_in});
  check_floating(name, gate_up_in);
  check_same_dtype(name, gate_up_in, w_in);
  check_rank(name, w_in, 3, "weight [experts, out, F]");
  check_dispatch(name, gate_up_in, d);
  const int64_t f = w_in.size(2), outf = w_in.size(1);
  LT_CHECK(w_in.size(0) == d.experts && gate_up_in.size(1) == 2 * f,
           std::string(name) + ": rows " + shape_str(gate_up_in.shape()) + ", weight " + shape_str(w_in.shape()),
           "each row holds [gate | up], each as wide as the weight's input features",
           "pass the gate | up rows and the experts' down projections");
  Tensor x = contiguous(gate_up_in), w = contiguous(w_in);
  const int64_t rows = x.size(0);
  auto activation = [f, rows, gelu](const Tensor& gu) {
    Tensor a = Tensor::empty({rows, f}, gu.dtype(), gu.device());
    backend_of(gu).swiglu_fwd(a, column_view(gu, f, 0), column_view(gu, f, f), gelu);
    return a;
  };
  Tensor y = Tensor::empty({rows, outf}, x.dtype(), dev);
  moe_kernels_for(dev).grouped_gemm(y, activation(x), w, true, d.offsets, 1.0f, false);
  if (!needs_grad({x, w})) return y;
  const bool need_x = x.requires_grad(), need_w = w.requires_grad();
  SavedTensor saved_x(x), saved_w(need_x ? w : Tensor());
  const ParamGradTargets targets = param_grad_targets(w, Tensor());
  const DType grad_dt = targets.dtype;
  const Tensor offsets = d.offsets;
  const Shape ws = w.shape();
  record(y, name, {x, targets.w}, [=](const Tensor& g) {
    Tensor gc = contiguous_data(g), sx = saved_x.unpack(), sw = saved_w.unpack();
    Tensor gx, gw, act;
    if (need_x) {
      // As swiglu_linear: the input's gradient first, its kernel leaving the activation in dact.
      Tensor dact = Tensor::empty({rows, f}, g.dtype(), g.device());
      moe_kernels_for(g.device()).grouped_gemm(dact, gc, sw, false, offsets, 1.0f, false);
      gx = Tensor::empty({rows, 2 * f}, g.dtype(), g.device());
      if (need_w) act = dact;
      backend_of(g).swiglu_bwd(column_view(gx, f, 0), column_view(gx, f, f), dact, column_view(sx, f, 0),
                               column_view(sx, f, f), gelu, act);
    } else if (need_w) {
      act = activation(sx);
    }
    if (need_w) {
      gw = Tensor::empty(ws, grad_dt, g.device());
      moe_kernels_for(g.device()).grouped_gemm_wgrad(gw, gc, act, offsets, 1.0f);
    }
    return std::vector<Tensor>{gx, gw};
  });
  return y;
}

int64_t nf4_expert_group(const Nf4Stack& w, DType dtype) {
  const int64_t e = w.experts();
  if (const int64_t g = knob_int("LEANTRAIN_NF4_EXPERT_GROUP"); g > 0) return std::min(g, std::max<int64_t>(e, 1));
  const int64_t bytes = std::max<int64_t>(1, w.shape[1] * w.shape[2] * int64_t(dtype_size(dtype)));
  return std::clamp<int64_t>(kNf4ExpertBufferBytes / bytes, 1, std::max<int64_t>(e, 1));
}

namespace {

// c = a W_e^T (trans) or a W_e over each expert's rows, W dequantised nf4_expert_group experts at
// a time into one Workspace buffer: each group is a grouped GEMM over its experts' offsets
// (absolute rows, so the rows of the other experts stay as they are).
void nf4_grouped_gemm(const Tensor& c, const Tensor& a, const Nf4Stack& w, bool trans, const Tensor& offsets) {
  const Device dev = a.device();
  const int64_t e = w.experts(), g = nf4_expert_group(w, a.dtype()), d1 = w.shape[1], d2 = w.shape[2];
  Tensor buf;
  {
    MemoryCategoryScope ws(Category::Workspace);
    buf = Tensor::empty({g, d1, d2}, a.dtype(), dev);
  }
  MoeKernels& k = moe_kernels_for(dev);
  for (int64_t e0 = 0; e0 < e; e0 += g) {
    const int64_t n = std::min(g, e - e0);
    const Tensor wg = make_view(buf, {n, d1, d2}, {d1 * d2, d2, 1}, buf.offset());
    nf4_stack_dequantize_into(w, e0, n, wg);
    k.grouped_gemm(c, a, wg, trans, make_view(offsets, {n + 1}, {1}, offsets.offset() + e0), 1.0f, false);
  }
}

void check_nf4_stack(const char* name, const Tensor& rows, const Nf4Stack& w, const MoeDispatch& d, int64_t in) {
  check_floating(name, rows);
  check_dispatch(name, rows, d);
  LT_CHECK(w.shape.size() == 3 && w.experts() == d.experts && rows.size(1) == in && w.codes.device() == rows.device(),
           std::string(name) + ": rows " + shape_str(rows.shape()) + ", NF4 weight " + shape_str(w.shape),
           "one weight per expert (" + std::to_string(d.experts) + ") on the rows' device, its input features the rows' width",
           "pass the experts' NF4 stack");
  LT_CHECK(rows.dtype() != DType::F64, std::string(name) + ": f64 rows", "NF4 weights dequantise to f32, f16 or bf16",
           "use f32 rows");
}

}  // namespace

Tensor grouped_linear_nf4(const Tensor& xs_in, const Nf4Stack& w, const MoeDispatch& d) {
  const char* name = "grouped_linear_nf4";
  OpNameScope op(name);
  const int64_t in = w.shape.size() == 3 ? w.shape[2] : -1, outf = w.shape.size() == 3 ? w.shape[1] : -1;
  check_nf4_stack(name, xs_in, w, d, in);
  Tensor xs = contiguous(xs_in);
  const int64_t rows = xs.size(0);
  Tensor y = Tensor::empty({rows, outf}, xs.dtype(), xs.device());
  nf4_grouped_gemm(y, xs, w, true, d.offsets);
  if (!needs_grad({xs})) return y;
  const Tensor offsets = d.offsets;
  record(y, name, {xs}, [=](const Tensor& g) {
    Tensor gc = contiguous_data(g);
    Tensor gx = Tensor::empty({rows, in}, g.dtype(), g.device());
    nf4_grouped_gemm(gx, gc, w, false, offsets);
    return std::vector<Tensor>{gx};
  });
  return y;
}

Tensor grouped_swiglu_linear_nf4(const Tensor& gate_up_in, const Nf4Stack& w, const MoeDispatch& d, GateAct act) {
  const bool gelu = act == GateAct::GeluTanh;
  const char* name = "grouped_swiglu_linear_nf4";
  OpNameScope op(name);
  const int64_t f = w.shape.size() == 3 ? w.shape[2] : -1, outf = w.shape.size() == 3 ? w.shape[1] : -1;
  check_nf4_stack(name, gate_up_in, w, d, 2 * f);
  Tensor x = contiguous(gate_up_in);
  const int64_t rows = x.size(0);
  auto activation = [f, rows, gelu](const Tensor& gu) {
    Tensor a = Tensor::empty({rows, f}, gu.dtype(), gu.device());
    backend_of(gu).swiglu_fwd(a, column_view(gu, f, 0), column_view(gu, f, f), gelu);
    return a;
  };
  Tensor y = Tensor::empty({rows, outf}, x.dtype(), x.device());
  nf4_grouped_gemm(y, activation(x), w, true, d.offsets);
  if (!needs_grad({x})) return y;
  SavedTensor saved_x(x);
  const Tensor offsets = d.offsets;
  record(y, name, {x}, [=](const Tensor& g) {
    Tensor gc = contiguous_data(g), sx = saved_x.unpack();
    Tensor dact = Tensor::empty({rows, f}, g.dtype(), g.device());
    nf4_grouped_gemm(dact, gc, w, false, offsets);
    Tensor gx = Tensor::empty({rows, 2 * f}, g.dtype(), g.device());
    backend_of(g).swiglu_bwd(column_view(gx, f, 0), column_view(gx, f, f), dact, column_view(sx, f, 0),
                             column_view(sx, f, f), gelu, Tensor());
    return std::vector<Tensor>{gx};
  });
  return y;
}

namespace {

// grouped_lora_linear(_nf4): the base product from dense weights w (defined) or an NF4 stack.
Tensor grouped_lora_linear_impl(const char* name, const Tensor& xs_in, const Tensor& w_in, const Nf4Stack* nf4,
                                const Tensor& lin_in, const Tensor& lout_in, double scaling, const MoeDispatch& d) {
  OpNameScope op(name);
  const bool dense = w_in.defined();
  Device dev = common_device(name, dense ? std::vector<Tensor>{xs_in, w_in, lin_in, lout_in}
                                         : std::vector<Tensor>{xs_in, lin_in, lout_in});
  check_floating(name, xs_in);
  check_same_dtype(name, xs_in, lin_in);
  check_same_dtype(name, xs_in, lout_in);
  check_rank(name, lin_in, 3, "the adapter's first factor [experts, rank, in]");
  check_rank(name, lout_in, 3, "the adapter's second factor [experts, rank, out]");
  const int64_t in = lin_in.size(2), outf = lout_in.size(2), rank = lin_in.size(1);
  if (dense) {
    check_same_dtype(name, xs_in, w_in);
    check_rank(name, w_in, 3, "weight [experts, out, in]");
  } else {
    check_nf4_stack(name, xs_in, *nf4, d, in);
  }
  check_dispatch(name, xs_in, d);
  const Shape base_shape = dense ? w_in.shape() : nf4->shape;
  LT_CHECK(base_shape.size() == 3 && base_shape[0] == d.experts && base_shape[1] == outf && base_shape[2] == in &&
               xs_in.size(1) == in && lin_in.size(0) == d.experts && lout_in.size(0) == d.experts &&
               lout_in.size(1) == rank && rank >= 1,
           std::string(name) + ": rows " + shape_str(xs_in.shape()) + ", weight " + shape_str(base_shape) +
               ", adapter factors " + shape_str(lin_in.shape()) + " and " + shape_str(lout_in.shape()),
           "weight [" + std::to_string(d.experts) + ", out, in], factors [E, r, in] and [E, r, out], rows [R, in]",
           "pass the experts' weights and their adapter's factors");
  Tensor xs = contiguous(xs_in), w = dense ? contiguous(w_in) : Tensor(), lin = contiguous(lin_in),
         lout = contiguous(lout_in);
  const int64_t rows = xs.size(0);
  const float s = float(scaling);
  MoeKernels& k = moe_kernels_for(dev);
  // t = s xs lin_e^T: the scaling rides on the rank-r product, so the adapter's term is t lout_e.
  Tensor t = Tensor::empty({rows, rank}, xs.dtype(), dev);
  k.grouped_gemm(t, xs, lin, /*trans_w=*/true, d.offsets, s, false);
  Tensor y = Tensor::empty({rows, outf}, xs.dtype(), dev);
  if (dense) {
    // y = xs w_e^T + t lout_e in one pass: both products [N][K] (lout_e^T, r x out, copied: small).
    Tensor lout_t = Tensor::empty({d.experts, outf, rank}, lout.dtype(), dev);
    backend_for(dev).copy(lout_t, make_view(lout, {d.experts, outf, rank}, {rank * outf, 1, outf}, lout.offset()));
    k.grouped_gemm_pair(y, xs, w, /*trans_w=*/true, t, lout_t, /*trans_w2=*/true, d.offsets);
  } else {
    nf4_grouped_gemm(y, xs, *nf4, true, d.offsets);
    k.grouped_gemm(y, t, lout, /*trans_w=*/false, d.offsets, 1.0f, /*accumulate=*/true);  // y += t lout_e
  }
  std::vector<Tensor> ins = dense ? std::vector<Tensor>{xs, w, lin, lout} : std::vector<Tensor>{xs, lin, lout};
  if (!needs_grad(ins)) return y;
  const bool need_x = xs.requires_grad(), need_w = dense && w.requires_grad(), need_in = lin.requires_grad(),
             need_out = lout.requires_grad();
  SavedTensor saved_x(need_in || need_w ? xs : Tensor()), saved_t(need_out ? t : Tensor()),
      saved_w(need_x && dense ? w : Tensor()), saved_in(need_x ? lin : Tensor()), saved_out(lout);
  const ParamGradTargets tw = dense ? param_grad_targets(w, Tensor()) : ParamGradTargets{},
                         tin = param_grad_targets(lin, Tensor()), tout = param_grad_targets(lout, Tensor());
  const Tensor offsets = d.offsets;
  const Shape w_shape = base_shape, in_shape = lin.shape(), out_shape = lout.shape();
  const Nf4Stack base_nf4 = dense ? Nf4Stack{} : *nf4;
  std::vector<Tensor> targets = dense ? std::vector<Tensor>{xs, tw.w, tin.w, tout.w} : std::vector<Tensor>{xs, tin.w, tout.w};
  record(y, name, targets, [=](const Tensor& g) {
    MoeKernels& kb = moe_kernels_for(g.device());
    Tensor gc = contiguous_data(g), sx = saved_x.unpack(), st = saved_t.unpack(), sw = saved_w.unpack(),
           sin = saved_in.unpack(), sout = saved_out.unpack();
    Tensor gx, gw, gin, gout, u;
    if (need_out) {  // t_e^T g_e (t carries s)
      gout = Tensor::empty(out_shape, tout.dtype, g.device());
      kb.grouped_gemm_wgrad(gout, st, gc, offsets, 1.0f);
    }
    if (need_x || need_in) {  // u = s g lout_e^T [R, r]
      u = Tensor::empty({rows, rank}, g.dtype(), g.device());
      kb.grouped_gemm(u, gc, sout, /*trans_w=*/true, offsets, s, false);
    }
    if (need_in) {  // u_e^T xs_e
      gin = Tensor::empty(in_shape, tin.dtype, g.device());
      kb.grouped_gemm_wgrad(gin, u, sx, offsets, 1.0f);
    }
    if (need_w) {
      gw = Tensor::empty(w_shape, tw.dtype, g.device());
      kb.grouped_gemm_wgrad(gw, gc, sx, offsets, 1.0f);
    }
    if (need_x) {  // g w_e + u lin_e: one pass for dense experts (both [K][N]), else u lin_e added
      gx = Tensor::empty({rows, in}, g.dtype(), g.device());
      if (dense) {
        kb.grouped_gemm_pair(gx, gc, sw, /*trans_w=*/false, u, sin, /*trans_w2=*/false, offsets);
      } else {
        nf4_grouped_gemm(gx, gc, base_nf4, false, offsets);
        kb.grouped_gemm(gx, u, sin, /*trans_w=*/false, offsets, 1.0f, /*accumulate=*/true);
      }
    }
    return dense ? std::vector<Tensor>{gx, gw, gin, gout} : std::vector<Tensor>{gx, gin, gout};
  });
  return y;
}

}  // namespace

Tensor grouped_lora_linear(const Tensor& xs, const Tensor& w, const Tensor& lin, const Tensor& lout, double scaling,
                           const MoeDispatch& d) {
  LT_CHECK(w.defined(), "grouped_lora_linear: no base weight", "the experts' weights [E, out, in] are the base",
           "pass them (grouped_lora_linear_nf4 takes NF4 experts)");
  return grouped_lora_linear_impl("grouped_lora_linear", xs, w, nullptr, lin, lout, scaling, d);
}

Tensor grouped_lora_linear_nf4(const Tensor& xs, const Nf4Stack& w, const Tensor& lin, const Tensor& lout,
                               double scaling, const MoeDispatch& d) {
  return grouped_lora_linear_impl("grouped_lora_linear_nf4", xs, Tensor(), &w, lin, lout, scaling, d);
}

Tensor moe_combine(const Tensor& ys_in, const Tensor& weights_in, const Tensor& idx_in, const MoeDispatch& d) {
  const char* name = "moe_combine";
  OpNameScope op(name);
  Device dev = common_device(name, {ys_in, weights_in, idx_in});
  check_floating(name, ys_in);
  check_floating(name, weights_in);
  check_dispatch(name, ys_in, d);
  LT_CHECK(weights_in.shape() == Shape({d.tokens, d.k}) && idx_in.shape() == weights_in.shape() &&
               idx_in.dtype() == DType::I32,
           std::string(name) + ": weights " + shape_str(weights_in.shape()) + ", indices " + shape_str(idx_in.shape()),
           "one router weight and one i32 expert index per routed slot [" + std::to_string(d.tokens) + ", " +
               std::to_string(d.k) + "]",
           "pass moe_route's weights and idx");
  Tensor ys = contiguous(ys_in), w = contiguous(weights_in), idx = contiguous(idx_in);
  const int64_t n = d.tokens, c = ys.size(1);
  Tensor out = Tensor::empty({n, c}, ys.dtype(), dev);
  moe_kernels_for(dev).moe_combine(out, ys, w, idx, d.pos);
  if (!needs_grad({ys, w})) return out;
  const bool need_w = w.requires_grad();
  SavedTensor saved_y(ys), saved_w(w);
  const Tensor pos = d.pos;
  record(out, name, {ys, w}, [=](const Tensor& g) {
    Tensor gc = contiguous_data(g), sy = saved_y.unpack(), sw = saved_w.unpack();
    Tensor dys = Tensor::empty(sy.shape(), g.dtype(), g.device());
    Tensor dw = Tensor::empty(sw.shape(), sw.dtype(), g.device());
    moe_kernels_for(g.device()).moe_combine_bwd(dys, dw, gc, sy, sw, pos);
    return std::vector<Tensor>{dys, need_w ? dw : Tensor()};
  });
  return out;
}

}  // namespace lt
