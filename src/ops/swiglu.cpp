// SwiGLU, the LLaMA MLP's activation, as one op: silu(gate) * up. As two ops (silu, then mul) the
// backward would keep gate, silu(gate) and up; this one keeps gate and up only (silu is
// recomputed in the backward kernel), and the packed form takes both from one fused
// gate | up projection and returns one gradient for it.
#include "ops/op_common.h"

namespace lt {
using namespace detail;

namespace {

// [N, F] view of the F columns of a contiguous [..., W] tensor that start `col` into each row.
Tensor columns(const Tensor& x, int64_t f, int64_t col) {
  const int64_t w = x.size(-1), n = w == 0 ? 0 : x.numel() / w;
  return make_view(x, {n, f}, {w, 1}, x.offset() + col);
}

Shape with_last(Shape s, int64_t last) {
  s.back() = last;
  return s;
}

}  // namespace

Tensor swiglu_packed(const Tensor& gate_up_in) {
  const char* name = "swiglu_packed";
  OpNameScope op("swiglu");
  check_floating(name, gate_up_in);
  LT_CHECK(gate_up_in.dim() >= 1 && gate_up_in.size(-1) % 2 == 0,
           std::string(name) + ": input " + shape_str(gate_up_in.shape()),
           "its last dim holds [gate | up], two halves of equal width", "pass the fused gate | up projection");
  const int64_t F = gate_up_in.size(-1) / 2;
  Tensor x = contiguous(gate_up_in);
  Tensor out = Tensor::empty(with_last(x.shape(), F), x.dtype(), x.device());
  backend_of(x).swiglu_fwd(columns(out, F, 0), columns(x, F, 0), columns(x, F, F));
  if (!needs_grad({x})) return out;
  SavedTensor saved(x);
  record(out, "swiglu", {x}, [=](const Tensor& g) {
    Tensor sx = saved.unpack(), gc = contiguous_data(g);
    Tensor dx = Tensor::empty(sx.shape(), g.dtype(), g.device());
    backend_of(g).swiglu_bwd(columns(dx, F, 0), columns(dx, F, F), columns(gc, F, 0), columns(sx, F, 0),
                             columns(sx, F, F));
    return std::vector<Tensor>{dx};
  });
  return out;
}

Tensor swiglu(const Tensor& gate_in, const Tensor& up_in) {
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
  backend_of(gate).swiglu_fwd(columns(out, F, 0), columns(gate, F, 0), columns(up, F, 0));
  if (!needs_grad({gate, up})) return out;
  SavedTensor saved_gate(gate), saved_up(up);
  record(out, "swiglu", {gate, up}, [=](const Tensor& g) {
    Tensor sg = saved_gate.unpack(), su = saved_up.unpack(), gc = contiguous_data(g);
    Tensor dgate = Tensor::empty(sg.shape(), g.dtype(), g.device());
    Tensor dup = Tensor::empty(su.shape(), g.dtype(), g.device());
    backend_of(g).swiglu_bwd(columns(dgate, F, 0), columns(dup, F, 0), columns(gc, F, 0), columns(sg, F, 0),
                             columns(su, F, 0));
    return std::vector<Tensor>{dgate, dup};
  });
  return out;
}

}  // namespace lt
