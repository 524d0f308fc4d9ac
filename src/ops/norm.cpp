// layer_norm, rms_norm and softmax over the last dim. The kernels see 2-D [rows, C] views;
// statistics (mean, rstd) are kept in f32 (f64 for f64) and saved for the backward, which
// needs them with x and w. Nothing is saved when no gradient will flow.
#include "ops/op_common.h"

namespace lt {
using namespace detail;

namespace {

// Checks that an affine parameter is a [C] vector of x's dtype.
void check_affine(const char* op, const Tensor& x, const Tensor& p, const char* name) {
  check_same_dtype(op, x, p);
  LT_CHECK(p.dim() == 1 && p.size(0) == x.size(-1),
           std::string(op) + ": " + name + " has shape " + shape_str(p.shape()),
           "it must be [" + std::to_string(x.size(-1)) + "] to match the last dim of input " + shape_str(x.shape()),
           "create it with the normalised size");
}

void check_norm_input(const char* op, const Tensor& x) {
  check_floating(op, x);
  LT_CHECK(x.dim() >= 1 && x.size(-1) > 0, std::string(op) + ": input of shape " + shape_str(x.shape()),
           "it needs a non-empty last dimension to normalise over", "pass a tensor shaped [..., C]");
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& w_in, const Tensor& b_in, double eps) {
  OpNameScope op("layer_norm");
  Device dev = common_device("layer_norm", {x, w_in, b_in});
  check_norm_input("layer_norm", x);
  LT_CHECK(w_in.defined(), "layer_norm: no weight", "the kernels need a [C] weight", "pass ones([C]) for none");
  check_affine("layer_norm", x, w_in, "weight");
  if (b_in.defined()) check_affine("layer_norm", x, b_in, "bias");
  Tensor xc = contiguous(x), w = contiguous(w_in), b = b_in.defined() ? contiguous(b_in) : Tensor();
  const int64_t C = x.size(-1), N = x.numel() / C;
  const DType aux = aux_dtype(x.dtype());
  Tensor y = Tensor::empty(x.shape(), x.dtype(), dev);
  Tensor mu = Tensor::empty({N}, aux, dev);
  Tensor rstd = Tensor::empty({N}, aux, dev);
  backend_for(dev).layernorm_fwd(rows_view(y), mu, rstd, rows_view(xc), w, b, float(eps));
  if (!needs_grad({xc, w, b})) return y;
  const bool need_x = xc.requires_grad(), need_w = w.requires_grad();
  const bool need_b = b.defined() && b.requires_grad();
  // The kernel path (dx or dw) reads x, w, mean, rstd; a bias-only gradient reads nothing.
  const bool kernel = need_x || need_w;
  SavedTensor saved_x(kernel ? xc : Tensor()), saved_w(kernel ? w : Tensor());
  SavedTensor saved_mu(kernel ? mu : Tensor()), saved_rstd(kernel ? rstd : Tensor());
  Shape xs = x.shape();
  const ParamGradTargets targets = param_grad_targets(w, b);  // f32 dw, db under autocast
  const DType param_dt = targets.dtype;
  record(y, "layer_norm", {xc, targets.w, targets.b}, [=](const Tensor& g) {
    Tensor g2 = rows_view(contiguous_data(g));
    Tensor dx, dw, db;
    if (kernel) {
      Tensor sx = saved_x.unpack(), sw = saved_w.unpack(), smu = saved_mu.unpack(), srstd = saved_rstd.unpack();
      dx = Tensor::empty(xs, g.dtype(), g.device());
      if (need_w) dw = Tensor::empty({C}, param_dt, g.device());
      if (need_b) db = Tensor::empty({C}, param_dt, g.device());
      backend_of(g).layernorm_bwd(rows_view(dx), dw, db, g2, rows_view(sx), sw, smu, srstd);
      if (!need_x) dx = Tensor();
    } else {
      db = column_sums(g2, param_dt);
    }
    return std::vector<Tensor>{dx, dw, db};
  });
  return y;
}

Tensor rms_norm(const Tensor& x, const Tensor& w_in, double eps, bool unit_offset) {
  const float w_offset = unit_offset ? 1.0f : 0.0f;
  OpNameScope op("rms_norm");
  Device dev = common_device("rms_norm", {x, w_in});
  check_norm_input("rms_norm", x);
  LT_CHECK(w_in.defined(), "rms_norm: no weight", "the kernels need a [C] weight", "pass ones([C]) for none");
  check_affine("rms_norm", x, w_in, "weight");
  Tensor xc = contiguous(x), w = contiguous(w_in);
  const int64_t C = x.size(-1), N = x.numel() / C;
  Tensor y = Tensor::empty(x.shape(), x.dtype(), dev);
  Tensor rstd = Tensor::empty({N}, aux_dtype(x.dtype()), dev);
  backend_for(dev).rmsnorm_fwd(rows_view(y), rstd, rows_view(xc), w, float(eps), w_offset);
  if (!needs_grad({xc, w})) return y;
  const bool need_x = xc.requires_grad(), need_w = w.requires_grad();
  SavedTensor saved_x(xc), saved_w(w), saved_rstd(rstd);
  Shape xs = x.shape();
  const ParamGradTargets targets = param_grad_targets(w, Tensor());  // f32 dw under autocast
  const DType param_dt = targets.dtype;
  record(y, "rms_norm", {xc, targets.w}, [=](const Tensor& g) {
    Tensor sx = saved_x.unpack(), sw = saved_w.unpack(), srstd = saved_rstd.unpack();
    Tensor dx = Tensor::empty(xs, g.dtype(), g.device());
    Tensor dw = need_w ? Tensor::empty({C}, param_dt, g.device()) : Tensor();
    backend_of(g).rmsnorm_bwd(rows_view(dx), dw, rows_view(contiguous_data(g)), rows_view(sx), sw, srstd, w_offset);
    return std::vector<Tensor>{need_x ? dx : Tensor(), dw};
  });
  return y;
}

namespace {

// The fused residual add + norm has two outputs, and the engine's nodes have one gradient
// each. So sum's node does the work and y's node only parks dy for it: y's node has an edge
// to sum's node, which therefore runs after it, and sum's node runs even when sum itself got
// no gradient (apply_without_grad). dy absent: the gradient of sum passes through unchanged.
struct ParkedGrad {
  Tensor dy;
};

AddNormResult add_norm(const char* op, bool rms, const Tensor& x, const Tensor& r, const Tensor& w_in,
                       const Tensor& b_in, double eps, float w_offset = 0.0f) {
  OpNameScope name(op);
  Device dev = common_device(op, {x, r, w_in, b_in});
  check_norm_input(op, x);
  check_same_dtype(op, x, r);
  LT_CHECK(x.shape() == r.shape(),
           std::string(op) + ": x has shape " + shape_str(x.shape()) + " but residual has " + shape_str(r.shape()),
           "the fused add does not broadcast: both addends must have one shape",
           "broadcast the smaller one with expand(), or call add() and then the norm");
  LT_CHECK(w_in.defined(), std::string(op) + ": no weight", "the kernels need a [C] weight", "pass ones([C]) for none");
  check_affine(op, x, w_in, "weight");
  if (b_in.defined()) check_affine(op, x, b_in, "bias");
  // x and r are only read here (the backward saves the sum), so unrecorded copies do if needed.
  Tensor xc = contiguous_data(x), rc = contiguous_data(r);
  Tensor w = contiguous(w_in), b = b_in.defined() ? contiguous(b_in) : Tensor();
  const int64_t C = x.size(-1), N = x.numel() / C;
  const DType aux = aux_dtype(x.dtype());
  // The unfused add + norm allocate the same four tensors in this order.
  AddNormResult out{Tensor::empty(x.shape(), x.dtype(), dev), Tensor::empty(x.shape(), x.dtype(), dev)};
  Tensor mu = rms ? Tensor() : Tensor::empty({N}, aux, dev);
  Tensor rstd = Tensor::empty({N}, aux, dev);
  if (rms) backend_for(dev).add_rmsnorm_fwd(rows_view(out.sum), rows_view(out.y), rstd, rows_view(xc), rows_view(rc), w, float(eps), w_offset);
  else backend_for(dev).add_layernorm_fwd(rows_view(out.sum), rows_view(out.y), mu, rstd, rows_view(xc), rows_view(rc), w, b, float(eps));

  std::vector<Tensor> inputs{x, r, w};
  if (!rms) inputs.push_back(b);
  if (!needs_grad(inputs)) return out;
  const bool need_x = x.requires_grad(), need_r = r.requires_grad(), need_w = w.requires_grad();
  const bool need_b = b.defined() && b.requires_grad();
  // The kernel path (d(sum) or dw) reads the sum, w, mean, rstd; a bias-only gradient reads nothing.
  const bool kernel = need_x || need_r || need_w;
  SavedTensor saved_sum(kernel ? out.sum.detach() : Tensor()), saved_w(kernel ? w : Tensor());
  SavedTensor saved_mu(kernel ? mu : Tensor()), saved_rstd(kernel ? rstd : Tensor());
  auto parked = std::make_shared<ParkedGrad>();
  Shape xs = x.shape();
  const ParamGradTargets targets = param_grad_targets(w, b);  // f32 dw, db under autocast
  const DType param_dt = targets.dtype;
  inputs[2] = targets.w;
  if (!rms) inputs[3] = targets.b;
  record(out.sum, op, inputs, [=](const Tensor& ds) {
    Tensor dy = std::move(parked->dy);
    parked->dy = Tensor();
    std::vector<Tensor> grads(rms ? 3 : 4);
    if (!dy.defined()) {
      grads[0] = need_x ? ds : Tensor();
      grads[1] = need_r ? ds : Tensor();
      return grads;
    }
    Tensor dy2 = rows_view(contiguous_data(dy));
    if (kernel) {
      Tensor ssum = saved_sum.unpack(), sw = saved_w.unpack(), smu = saved_mu.unpack(), srstd = saved_rstd.unpack();
      Tensor dsum = Tensor::empty(xs, dy.dtype(), dy.device());
      Tensor dw = need_w ? Tensor::empty({C}, param_dt, dy.device()) : Tensor();
      Tensor db = need_b ? Tensor::empty({C}, param_dt, dy.device()) : Tensor();
      Tensor ds2 = ds.defined() ? rows_view(contiguous_data(ds)) : Tensor();
      if (rms) backend_of(dy).add_rmsnorm_bwd(rows_view(dsum), dw, dy2, ds2, rows_view(ssum), sw, srstd, w_offset);
      else backend_of(dy).add_layernorm_bwd(rows_view(dsum), dw, db, dy2, ds2, rows_view(ssum), sw, smu, srstd);
      grads[0] = need_x ? dsum : Tensor();
      grads[1] = need_r ? dsum : Tensor();
      grads[2] = dw;
      if (!rms) grads[3] = db;
    } else {
      grads[3] = column_sums(dy2, param_dt);
    }
    return grads;
  });
  if (out.sum.grad_fn()) {
    out.sum.grad_fn()->apply_without_grad = true;
    record(out.y, op, {out.sum}, [parked](const Tensor& dy) {
      parked->dy = dy;
      return std::vector<Tensor>(1);
    });
  }
  return out;
}

}  // namespace

AddNormResult add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& w, const Tensor& b, double eps) {
  return add_norm("add_layer_norm", false, x, residual, w, b, eps);
}

AddNormResult add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& w, double eps, bool unit_offset) {
  return add_norm("add_rms_norm", true, x, residual, w, Tensor(), eps, unit_offset ? 1.0f : 0.0f);
}

Tensor softmax(const Tensor& x) {
  OpNameScope op("softmax");
  check_norm_input("softmax", x);
  Tensor xc = contiguous(x);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  backend_of(x).softmax_fwd(rows_view(y), rows_view(xc));
  if (!needs_grad({xc})) return y;
  // The backward reads only the output: dx = y * (dy - sum(dy * y)).
  SavedTensor saved_y(y.detach());
  record(y, "softmax", {xc}, [saved_y](const Tensor& g) {
    Tensor sy = saved_y.unpack();
    Tensor dx = Tensor::empty(sy.shape(), g.dtype(), g.device());
    backend_of(g).softmax_bwd(rows_view(dx), rows_view(contiguous_data(g)), rows_view(sy));
    return std::vector<Tensor>{dx};
  });
  return y;
}

}  // namespace lt
