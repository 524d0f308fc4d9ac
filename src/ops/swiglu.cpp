// SwiGLU, the LLaMA MLP's activation, as one op: silu(gate) * up. As two ops (silu, then mul) the
// backward would keep gate, silu(gate) and up; this one keeps gate and up only (silu is
// recomputed in the backward kernel), and the packed form takes both from one fused
// gate | up projection and returns one gradient for it. swiglu_linear goes one step further for
// the MLP's down projection: its input, the activation, is not kept but made again in the backward
// (by the input gradient's kernel, into the buffer it has just read), so the whole MLP keeps its
// input and the gate | up buffer.
#include "autograd/kept_outputs.h"
#include "ops/linear_args.h"
#include "ops/op_common.h"

namespace lt {
using namespace detail;

namespace {

Shape with_last(Shape s, int64_t last) {
  s.back() = last;
  return s;
}

}  // namespace

Tensor swiglu_packed(const Tensor& gate_up_in, GateAct act) {
  const bool gelu = act == GateAct::GeluTanh;
  const char* name = "swiglu_packed";
  OpNameScope op("swiglu");
  check_floating(name, gate_up_in);
  LT_CHECK(gate_up_in.dim() >= 1 && gate_up_in.size(-1) % 2 == 0,
           std::string(name) + ": input " + shape_str(gate_up_in.shape()),
           "its last dim holds [gate | up], two halves of equal width", "pass the fused gate | up projection");
  const int64_t F = gate_up_in.size(-1) / 2;
  Tensor x = contiguous(gate_up_in);
  Tensor out = Tensor::empty(with_last(x.shape(), F), x.dtype(), x.device());
  backend_of(x).swiglu_fwd(column_view(out, F, 0), column_view(x, F, 0), column_view(x, F, F), gelu);
  if (!needs_grad({x})) return out;
  SavedTensor saved(x);
  record(out, "swiglu", {x}, [=](const Tensor& g) {
    Tensor sx = saved.unpack(), gc = contiguous_data(g);
    Tensor dx = Tensor::empty(sx.shape(), g.dtype(), g.device());
    backend_of(g).swiglu_bwd(column_view(dx, F, 0), column_view(dx, F, F), column_view(gc, F, 0), column_view(sx, F, 0),
                             column_view(sx, F, F), gelu, Tensor());
    return std::vector<Tensor>{dx};
  });
  return out;
}

Tensor swiglu(const Tensor& gate_in, const Tensor& up_in, GateAct act) {
  const bool gelu = act == GateAct::GeluTanh;
  const char* name = "swiglu";
  OpNameScope op("swiglu");
  common_device(name, {gate_in, up_in});
  check_floating(name, gate_in);
  check_same_dtype(name, gate_in, up_in);
  LT_CHECK(gate_in.dim() >= 1 && gate_in.shape() == up_in.shape(),
           std::string(name) + ": gate " + shape_str(gate_in.shape()) + " and up " + shape_str(up_in.shape()),
           "they are multiplied elementwise", "pass two tensors of one shape");
  const int64_t F = gate_in.size(-1);
  Tensor gate = contiguous(gate_in), up = contiguous(up_in);
  Tensor out = Tensor::empty(gate.shape(), gate.dtype(), gate.device());
  backend_of(gate).swiglu_fwd(column_view(out, F, 0), column_view(gate, F, 0), column_view(up, F, 0), gelu);
  if (!needs_grad({gate, up})) return out;
  SavedTensor saved_gate(gate), saved_up(up);
  record(out, "swiglu", {gate, up}, [=](const Tensor& g) {
    Tensor sg = saved_gate.unpack(), su = saved_up.unpack(), gc = contiguous_data(g);
    Tensor dgate = Tensor::empty(sg.shape(), g.dtype(), g.device());
    Tensor dup = Tensor::empty(su.shape(), g.dtype(), g.device());
    backend_of(g).swiglu_bwd(column_view(dgate, F, 0), column_view(dup, F, 0), column_view(gc, F, 0), column_view(sg, F, 0),
                             column_view(su, F, 0), gelu, Tensor());
    return std::vector<Tensor>{dgate, dup};
  });
  return out;
}

Tensor swiglu_linear(const Tensor& gate_up_in, const Tensor& w_in, const Tensor& bias, GateAct act) {
  const bool gelu = act == GateAct::GeluTanh;
  const char* name = "swiglu_linear";
  OpNameScope op_name("swiglu_linear");
  Device dev = common_device(name, {gate_up_in, w_in, bias});
  check_floating(name, gate_up_in);
  check_same_dtype(name, gate_up_in, w_in);
  check_rank(name, w_in, 2, "weight [out, F]");
  const int64_t F = w_in.size(1), outf = w_in.size(0);
  LT_CHECK(gate_up_in.dim() >= 1 && gate_up_in.size(-1) == 2 * F,
           std::string(name) + ": input " + shape_str(gate_up_in.shape()) + ", weight " + shape_str(w_in.shape()),
           "the input's last dim holds [gate | up], each as wide as the weight's input features",
           "pass the fused gate | up projection and the down projection's [out, F] weight");
  if (bias.defined()) {
    check_same_dtype(name, gate_up_in, bias);
    LT_CHECK(bias.dim() == 1 && bias.size(0) == outf, std::string(name) + ": bias shape " + shape_str(bias.shape()),
             "expected [" + std::to_string(outf) + "]", "match out_features");
  }
  Tensor x = contiguous(gate_up_in), w = contiguous(w_in);
  const int64_t rows = x.numel() / (2 * F);
  Shape out_shape = x.shape();
  out_shape.back() = outf;
  // The activation is a temporary of the forward; the GEMM's result may be selective
  // checkpointing's kept one (kept_outputs.h), as linear's is.
  auto activation = [F, rows, gelu](const Tensor& gu) {
    Tensor a = Tensor::empty({rows, F}, gu.dtype(), gu.device());
    backend_of(gu).swiglu_fwd(a, column_view(gu, F, 0), column_view(gu, F, F), gelu);
    return a;
  };
  GemmDesc d;
  d.m = rows;
  d.n = outf;
  d.k = F;
  d.trans_b = true;
  bool fresh = true;
  Tensor out = kept_or_empty("linear", out_shape, x.dtype(), dev, fresh);
  if (fresh) {
    backend_for(dev).gemm(out, activation(x), w, d, bias);
    keep_outputs("linear", {out});
  }
  if (!needs_grad({x, w, bias})) return out;
  const bool need_x = x.requires_grad(), need_w = w.requires_grad(), need_b = bias.defined() && bias.requires_grad();
  SavedTensor saved_x((need_x || need_w) ? x : Tensor()), saved_w(need_x ? w : Tensor());
  const ParamGradTargets targets = param_grad_targets(w, bias);
  const DType grad_dt = targets.dtype;
  record(out, "swiglu_linear", {x, targets.w, targets.b}, [=](const Tensor& g) {
    Tensor sx = saved_x.unpack(), sw = saved_w.unpack();
    Tensor g2 = reshape(contiguous_data(g), {rows, outf});
    Tensor gx, gw, gb, act;
    if (need_x) {
      // The input's gradient first: its kernel overwrites dact, once read, with the activation
      // the weight's gradient needs, so the activation costs no kernel of its own and no buffer.
      Tensor dact = matmul(g2, sw);  // [rows, out] @ [out, F]
      gx = Tensor::empty(sx.shape(), g.dtype(), g.device());
      if (need_w) act = dact;
      backend_of(g).swiglu_bwd(column_view(gx, F, 0), column_view(gx, F, F), dact, column_view(sx, F, 0),
                               column_view(sx, F, F), gelu, act);
    } else if (need_w) {
      act = activation(sx);
    }
    // [out, rows] @ [rows, F]
    WeightBiasGrad wb = weight_bias_grad(g2, act, false, need_w, need_b, grad_dt);
    gw = wb.w, gb = wb.b;
    return std::vector<Tensor>{gx, gw, gb};
  });
  return out;
}

}  // namespace lt
