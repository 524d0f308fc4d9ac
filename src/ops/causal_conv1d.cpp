// The causal depthwise convolution over time with its SiLU (Gated DeltaNet's short convolution,
// transformers' causal_conv1d_fn). It saves only its input (and the weight): the pre-activation
// is recomputed in the backward (K multiply-adds an element), where one [B, T, C] buffer holds
// its gradient for the transposed convolution and the weight's sums. With doc_pos (packed
// documents) no tap reaches across a document's start, forward or backward.
#include "ops/op_common.h"

namespace lt {
using namespace detail;

Tensor causal_conv1d(const Tensor& x_in, const Tensor& w_in, bool silu, const Tensor& doc_pos_in) {
  const char* name = "causal_conv1d";
  OpNameScope op(name);
  const Device dev = common_device(name, {x_in, w_in, doc_pos_in});
  check_floating(name, x_in);
  check_same_dtype(name, x_in, w_in);
  check_rank(name, x_in, 3, "x [B, T, C]");
  check_rank(name, w_in, 2, "w [C, K]");
  LT_CHECK(w_in.size(0) == x_in.size(2) && w_in.size(1) >= 1,
           std::string(name) + ": x " + shape_str(x_in.shape()) + ", w " + shape_str(w_in.shape()),
           "a depthwise convolution has one filter of K taps per channel", "pass w [C, K] for x [B, T, C]");
  LT_CHECK(!doc_pos_in.defined() ||
               (doc_pos_in.dtype() == DType::I32 && doc_pos_in.shape() == Shape({x_in.size(0), x_in.size(1)})),
           std::string(name) + ": doc_pos is " + std::string(dtype_name(doc_pos_in.dtype())) + " " +
               shape_str(doc_pos_in.shape()),
           "it must be i32 [B, T] = " + shape_str({x_in.size(0), x_in.size(1)}) +
               ": each token's position inside its document",
           "pass the batch's document positions (nn::TokenMask::doc_pos)");
  const Tensor doc_pos = doc_pos_in.defined() ? contiguous_data(doc_pos_in) : Tensor();
  if (doc_pos.defined()) check_doc_pos_values(name, doc_pos);
  // x read in place when its channels are contiguous (a column slice of a projection), else copied.
  const Tensor x = x_in.strides()[2] == 1 ? x_in : contiguous(x_in);
  const Tensor w = contiguous(w_in);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), dev);
  backend_for(dev).conv1d_causal_fwd(out, x, w, silu, doc_pos);
  if (!needs_grad({x, w})) return out;
  SavedTensor saved_x(x), saved_w(w), saved_doc(doc_pos);
  const bool need_x = x.requires_grad(), need_w = w.requires_grad();
  record(out, name, {x, w}, [=](const Tensor& g) {
    const Tensor sx = saved_x.unpack(), sw = saved_w.unpack(), sdoc = saved_doc.unpack();
    const Device gd = g.device();
    Tensor dpre = Tensor::empty(sx.shape(), sx.dtype(), gd);
    Tensor dx = need_x ? Tensor::empty(sx.shape(), sx.dtype(), gd) : Tensor();
    Tensor dw = need_w ? Tensor::empty(sw.shape(), sw.dtype(), gd) : Tensor();
    backend_for(gd).conv1d_causal_bwd(dx, dw, dpre, contiguous_data(g), sx, sw, silu, sdoc);
    return std::vector<Tensor>{dx, dw};
  });
  return out;
}

}  // namespace lt
