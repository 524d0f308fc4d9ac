// max_pool2d (NCHW or NHWC): validation, allocation and the autograd node. The backward needs only where each
// maximum was: one byte per output (its window position), never the input.
#include "ops/op_common.h"

namespace lt {
using namespace detail;

Tensor max_pool2d(const Tensor& x_in, Size2 kernel, Size2 stride, Size2 padding, ImageLayout layout) {
  const char* name = "max_pool2d";
  OpNameScope op(name);
  Device dev = common_device(name, {x_in});
  check_floating(name, x_in);
  const bool cl = layout == ImageLayout::NHWC;
  check_rank(name, x_in, 4, cl ? "input [N, H, W, C]" : "input [N, C, H, W]");
  const std::string args = "kernel (" + std::to_string(kernel.h) + ", " + std::to_string(kernel.w) + "), stride (" +
                           std::to_string(stride.h) + ", " + std::to_string(stride.w) + "), padding (" +
                           std::to_string(padding.h) + ", " + std::to_string(padding.w) + ")";
  LT_CHECK(kernel.h >= 1 && kernel.w >= 1 && kernel.h * kernel.w <= 256 && stride.h >= 1 && stride.w >= 1 &&
               padding.h >= 0 && padding.w >= 0 && 2 * padding.h <= kernel.h && 2 * padding.w <= kernel.w,
           "max_pool2d: " + args,
           "windows are 1 to 256 pixels, strides at least 1, padding at most half the kernel",
           "fix the layer's arguments");
  const ImageDims xd = image_dims(x_in.shape(), cl);
  const int64_t H = xd.h, W = xd.w;
  LT_CHECK(H + 2 * padding.h >= kernel.h && W + 2 * padding.w >= kernel.w,
           "max_pool2d: input " + shape_str(x_in.shape()) + " is smaller than the window (" + args + ")",
           "the output would have no pixels", "pass larger images or a smaller window");
  const Pool2dDesc d{kernel.h, kernel.w, stride.h, stride.w, padding.h, padding.w, cl};
  const int64_t OH = (H + 2 * padding.h - kernel.h) / stride.h + 1, OW = (W + 2 * padding.w - kernel.w) / stride.w + 1;
  Tensor x = contiguous(x_in);
  const Shape ys = cl ? Shape{xd.n, OH, OW, xd.c} : Shape{xd.n, xd.c, OH, OW};
  Tensor y = Tensor::empty(ys, x.dtype(), dev);
  Tensor idx = Tensor::empty(ys, DType::U8, dev);
  backend_for(dev).maxpool2d_fwd(y, idx, x, d);
  if (!needs_grad({x})) return y;
  SavedTensor saved_idx(idx);
  const Shape xs = x.shape();
  record(y, name, {x}, [=](const Tensor& g) {
    Tensor dx = Tensor::empty(xs, g.dtype(), g.device());
    backend_of(g).maxpool2d_bwd(dx, contiguous_data(g), saved_idx.unpack(), d);
    return std::vector<Tensor>{dx};
  });
  return y;
}

}  // namespace lt
