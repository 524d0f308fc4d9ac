// conv2d: validation, the output and workspace allocations, and the autograd node. The
// workspace is sized from the shapes alone (conv_workspace_bytes) so that a dry run on meta
// allocates what a GPU run allocates; cuDNN then chooses among the algorithms that fit it.
#include <algorithm>
#include <atomic>

#include "ops/op_common.h"

namespace lt {
using namespace detail;

namespace {

std::atomic<int64_t> g_workspace_limit{int64_t(64) << 20};

std::string pair_str(Size2 s) { return "(" + std::to_string(s.h) + ", " + std::to_string(s.w) + ")"; }

// A u8 workspace for one cuDNN call, or undefined when its size is 0.
Tensor workspace_for(const Shape& x, const Shape& y, DType dt, Device dev) {
  const int64_t bytes = conv_workspace_bytes(x, y, dt);
  if (bytes == 0) return Tensor();
  MemoryCategoryScope ws(Category::Workspace);
  return Tensor::empty({bytes}, DType::U8, dev);
}

}  // namespace

void set_conv_workspace_limit(int64_t bytes) {
  LT_CHECK(bytes >= 0 && bytes <= (int64_t(1) << 34), "conv workspace limit " + std::to_string(bytes) + " bytes",
           "it is 0 to 16 GiB", "pass a size in that range");
  g_workspace_limit = bytes;
}

int64_t conv_workspace_limit() { return g_workspace_limit; }

int64_t conv_workspace_bytes(const Shape& x, const Shape& y, DType dtype) {
  const int64_t elems = numel(x) + numel(y);
  return std::min(conv_workspace_limit(), elems * int64_t(dtype_size(dtype)));
}

Tensor conv2d(const Tensor& x_in, const Tensor& w_in, const Tensor& bias, Size2 stride, Size2 padding,
              ImageLayout layout) {
  const char* name = "conv2d";
  OpNameScope op(name);
  Device dev = common_device(name, {x_in, w_in, bias});
  check_floating(name, x_in);
  check_same_dtype(name, x_in, w_in);
  const bool cl = layout == ImageLayout::NHWC;
  check_rank(name, x_in, 4, cl ? "input [N, H, W, C]" : "input [N, C, H, W]");
  check_rank(name, w_in, 4, "weight [O, C, KH, KW]");
  const ImageDims xd = image_dims(x_in.shape(), cl);
  LT_CHECK(xd.c == w_in.size(1),
           "conv2d: the input has " + std::to_string(xd.c) + " channels (shape " + shape_str(x_in.shape()) +
               (cl ? ", NHWC" : "") + ") but the weight " + shape_str(w_in.shape()) + " expects " +
               std::to_string(w_in.size(1)),
           "a convolution's weight is [out, in, KH, KW]", "pass images with as many channels as the layer takes");
  LT_CHECK(stride.h >= 1 && stride.w >= 1 && padding.h >= 0 && padding.w >= 0,
           "conv2d: stride " + pair_str(stride) + ", padding " + pair_str(padding),
           "strides must be at least 1 and padding not negative", "fix the layer's arguments");
  const int64_t N = xd.n, O = w_in.size(0), KH = w_in.size(2), KW = w_in.size(3);
  const int64_t OH = (xd.h + 2 * padding.h - KH) / stride.h + 1;
  const int64_t OW = (xd.w + 2 * padding.w - KW) / stride.w + 1;
  LT_CHECK(KH >= 1 && KW >= 1 && xd.h + 2 * padding.h >= KH && xd.w + 2 * padding.w >= KW,
           "conv2d: input " + shape_str(x_in.shape()) + " with padding " + pair_str(padding) + " is smaller than the " +
               std::to_string(KH) + "x" + std::to_string(KW) + " kernel",
           "the output would have no pixels", "pass larger images or a smaller kernel");
  if (bias.defined()) {
    check_same_dtype(name, x_in, bias);
    LT_CHECK(bias.dim() == 1 && bias.size(0) == O, "conv2d: bias shape " + shape_str(bias.shape()),
             "expected [" + std::to_string(O) + "], one per output channel", "match the weight's first dim");
  }
  // NHWC takes the filter as [O, KH, KW, C]: a copy whose gradient flows back through permute.
  Tensor x = contiguous(x_in), w = contiguous(cl ? permute(w_in, {0, 2, 3, 1}) : w_in);
  Tensor b = bias.defined() ? contiguous(bias) : Tensor();
  const Conv2dDesc d{stride.h, stride.w, padding.h, padding.w, cl};
  const Shape ys = cl ? Shape{N, OH, OW, O} : Shape{N, O, OH, OW};
  Tensor y = Tensor::empty(ys, x.dtype(), dev);
  {
    Tensor ws = workspace_for(x.shape(), ys, x.dtype(), dev);
    backend_for(dev).conv2d_fwd(y, x, w, b, d, ws);
  }
  if (!needs_grad({x, w, b})) return y;
  const bool need_x = x.requires_grad(), need_w = w.requires_grad(), need_b = b.defined() && b.requires_grad();
  SavedTensor saved_x(need_w ? x : Tensor()), saved_w(need_x ? w : Tensor());
  const Shape xs = x.shape(), wshape = w.shape();
  record(y, name, {x, w, b}, [=](const Tensor& g_in) {
    Tensor g = contiguous_data(g_in), dx, dw, db;
    if (need_x) {
      dx = Tensor::empty(xs, g.dtype(), g.device());
      Tensor ws = workspace_for(xs, ys, g.dtype(), g.device());
      backend_of(g).conv2d_bwd_data(dx, g, saved_w.unpack(), d, ws);
    }
    if (need_w) {
      dw = Tensor::empty(wshape, g.dtype(), g.device());
      if (need_b) db = Tensor::empty({O}, g.dtype(), g.device());
      Tensor ws = workspace_for(xs, ys, g.dtype(), g.device());
      backend_of(g).conv2d_bwd_filter(dw, db, g, saved_x.unpack(), d, ws);
    } else if (need_b) {
      db = sum(g, cl ? std::vector<int64_t>{0, 1, 2} : std::vector<int64_t>{0, 2, 3});
    }
    return std::vector<Tensor>{dx, dw, db};
  });
  return y;
}

}  // namespace lt
