#include "ops/op_common.h"

namespace lt {
using namespace detail;

namespace {

Tensor binary_op(BinaryOp op, const char* name, const Tensor& a, const Tensor& b) {
  Device dev = common_device(name, {a, b});
  check_same_dtype(name, a, b);
  check_floating(name, a);
  Shape shape = broadcast_shapes(name, a.shape(), b.shape());
  Tensor out = Tensor::empty(shape, a.dtype(), dev);
  backend_for(dev).binary(op, out, expand_view(a, shape), expand_view(b, shape));
  if (!needs_grad({a, b})) return out;
  const bool need_a = a.requires_grad(), need_b = b.requires_grad();
  // Save only what the backward reads: mul needs the other operand, div needs b (and out).
  SavedTensor saved_a((op == BinaryOp::Mul && need_b) ? a : Tensor());
  SavedTensor saved_b(((op == BinaryOp::Mul && need_a) || op == BinaryOp::Div) ? b : Tensor());
  SavedTensor saved_out((op == BinaryOp::Div && need_b) ? out.detach() : Tensor());
  Shape as = a.shape(), bs = b.shape();
  record(out, name, {a, b}, [=](const Tensor& g) {
    Tensor sa = saved_a.unpack(), sb = saved_b.unpack(), so = saved_out.unpack();
    Tensor ga, gb;
    switch (op) {
      case BinaryOp::Add:
        if (need_a) ga = sum_to(g, as);
        if (need_b) gb = sum_to(g, bs);
        break;
      case BinaryOp::Sub:
        if (need_a) ga = sum_to(g, as);
        if (need_b) gb = sum_to(neg(g), bs);
        break;
      case BinaryOp::Mul:
        if (need_a) ga = sum_to(mul(g, sb), as);
        if (need_b) gb = sum_to(mul(g, sa), bs);
        break;
      case BinaryOp::Div:
        if (need_a) ga = sum_to(div(g, sb), as);
        if (need_b) gb = sum_to(neg(div(mul(g, so), sb)), bs);
        break;
    }
    return std::vector<Tensor>{ga, gb};
  });
  return out;
}

// y = op(x); backward dy * op'(x) needs x (saved only when a gradient will flow).
Tensor unary_op(UnaryOp op, const char* name, const Tensor& x, float alpha) {
  check_floating(name, x);
  Tensor xc = contiguous(x);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  backend_of(x).unary(op, out, xc, alpha);
  record_unary(op, name, out, xc, alpha);
  return out;
}

}  // namespace

void detail::record_unary(UnaryOp op, const char* name, Tensor& out, const Tensor& xc, float alpha) {
  if (!needs_grad({xc})) return;
  const bool linear = op == UnaryOp::Scale || op == UnaryOp::AddScalar || op == UnaryOp::Neg;
  // ReLU keeps its output, not its input: relu(x) > 0 exactly where x > 0, so the backward's mask is
  // the same, and the output is what the next layer keeps anyway (a conv after BatchNorm + ReLU),
  // while the input (BatchNorm's output) is then freed: one activation less per conv-BN-ReLU.
  const bool from_output = op == UnaryOp::Relu;
  SavedTensor saved_x(linear ? Tensor() : from_output ? out.detach() : xc);
  record(out, name, {xc}, [=](const Tensor& g) {
    Tensor sx = saved_x.unpack();
    Tensor gc = contiguous_data(g);
    Tensor dx = Tensor::empty(gc.shape(), gc.dtype(), gc.device());
    backend_of(gc).unary_backward(op, dx, gc, sx, alpha);
    return std::vector<Tensor>{dx};
  });
}

Tensor add(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::Add, "add", a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::Sub, "sub", a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::Mul, "mul", a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::Div, "div", a, b); }

Tensor scale(const Tensor& x, double s) { return unary_op(UnaryOp::Scale, "scale", x, float(s)); }
Tensor add_scalar(const Tensor& x, double s) { return unary_op(UnaryOp::AddScalar, "add_scalar", x, float(s)); }
Tensor neg(const Tensor& x) { return unary_op(UnaryOp::Neg, "neg", x, 0.f); }
Tensor exp(const Tensor& x) { return unary_op(UnaryOp::Exp, "exp", x, 0.f); }
Tensor log(const Tensor& x) { return unary_op(UnaryOp::Log, "log", x, 0.f); }
Tensor sqrt(const Tensor& x) { return unary_op(UnaryOp::Sqrt, "sqrt", x, 0.f); }
Tensor tanh(const Tensor& x) { return unary_op(UnaryOp::Tanh, "tanh", x, 0.f); }
Tensor sigmoid(const Tensor& x) { return unary_op(UnaryOp::Sigmoid, "sigmoid", x, 0.f); }
Tensor log_sigmoid(const Tensor& x) { return unary_op(UnaryOp::LogSigmoid, "log_sigmoid", x, 0.f); }
Tensor relu(const Tensor& x) { return unary_op(UnaryOp::Relu, "relu", x, 0.f); }
Tensor gelu(const Tensor& x, GeluApprox approx) {
  return approx == GeluApprox::Tanh ? unary_op(UnaryOp::GeluTanh, "gelu_tanh", x, 0.f)
                                    : unary_op(UnaryOp::GeluErf, "gelu_erf", x, 0.f);
}
Tensor silu(const Tensor& x) { return unary_op(UnaryOp::Silu, "silu", x, 0.f); }
Tensor pow_scalar(const Tensor& x, double p) { return unary_op(UnaryOp::PowScalar, "pow", x, float(p)); }

void add_(const Tensor& a, const Tensor& b) {
  Device dev = common_device("add_", {a, b});
  check_same_dtype("add_", a, b);
  Shape shape = broadcast_shapes("add_", a.shape(), b.shape());
  LT_CHECK(shape == a.shape(), "add_: the result shape " + shape_str(shape) + " differs from the target",
           "in-place add cannot grow the target " + shape_str(a.shape()), "use add()");
  LT_CHECK(a.is_contiguous(), "add_: target must be contiguous", "it is a strided view", "call contiguous() first");
  backend_for(dev).binary(BinaryOp::Add, a, a, expand_view(b, shape));
}

}  // namespace lt
