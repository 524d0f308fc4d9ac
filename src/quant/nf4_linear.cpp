// The dequantised weight is a Workspace tensor freed when the forward (or the backward) returns,
// so a model of NF4 layers holds at most one dequantised weight at a time: this is the per-layer
// form of issue 15's "tiles dequantised on the fly"; a fused dequantising GEMM can replace it
// without changing the op's contract.
#include "quant/nf4_linear.h"

#include "leantrain/autograd.h"
#include "leantrain/error.h"
#include "leantrain/memory.h"
#include "leantrain/ops.h"

namespace lt {

namespace {

Tensor dequantized_weight(const Nf4Weight& w, DType dtype) {
  MemoryCategoryScope ws(Category::Workspace);
  return nf4_dequantize(w, dtype);
}

}  // namespace

Tensor nf4_linear(const Tensor& x, const Nf4Weight& w, const Tensor& bias) {
  LT_CHECK(w.shape.size() == 2, "nf4_linear: the weight has shape " + shape_str(w.shape),
           "a linear weight is [out, in]", "quantise a 2-d weight");
  const int64_t in = w.shape[1], out = w.shape[0];
  LT_CHECK(x.dim() >= 1 && x.size(-1) == in,
           "nf4_linear: input " + shape_str(x.shape()) + ", weight " + shape_str(w.shape),
           "the input's last dim must be the weight's input features", "pass [..., " + std::to_string(in) + "]");
  LT_CHECK(!bias.defined() || !bias.requires_grad(), "nf4_linear: the bias requires grad",
           "an NF4 layer is a frozen base layer: only its input gets a gradient",
           "freeze the bias, or train it through an adapter");
  Tensor y;
  {
    NoGradGuard no_grad;
    y = linear(x, dequantized_weight(w, x.dtype()), bias);
  }
  if (!needs_grad({x})) return y;
  const Shape x_shape = x.shape();
  record(y, "nf4_linear", {x}, [w, x_shape, out](const Tensor& g) {
    NoGradGuard no_grad;
    const Tensor g2 = reshape(contiguous(g), {-1, out});
    return std::vector<Tensor>{reshape(matmul(g2, dequantized_weight(w, g.dtype())), x_shape)};
  });
  return y;
}

}  // namespace lt
