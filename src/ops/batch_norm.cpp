// batch_norm over NCHW or NHWC images: validation, allocation, the running-statistics update (in the
// backend op, in place) and the autograd node. The [C] mean and 1/std the forward used are
// kept for the backward (f32 whatever x's dtype; f64 for f64).
#include "core/knobs.h"
#include "leantrain/checkpoint.h"
#include "ops/op_common.h"

namespace lt {
using namespace detail;

namespace {

void check_channel_vector(const Tensor& x, int64_t C, const Tensor& p, const char* what) {
  check_floating("batch_norm", p);
  LT_CHECK(p.dim() == 1 && p.size(0) == C, std::string("batch_norm: ") + what + " has shape " + shape_str(p.shape()),
           "it must be [" + std::to_string(C) + "], one per channel of input " + shape_str(x.shape()),
           "build the norm with the number of channels its input has");
}

// The GPU's scratch for a channels-last norm (backend.h batchnorm_row_chunks), else undefined.
Tensor partials_for(const ImageDims& d, bool channels_last, Device dev) {
  if (!channels_last) return Tensor();
  MemoryCategoryScope ws(Category::Workspace);
  return Tensor::empty({2, batchnorm_row_chunks(d.n * d.h * d.w), d.c}, DType::F32, dev);
}

// relu: y = relu(norm(x)) in the same kernels; the output is then kept for the backward, which
// masks dy by it (what relu's own node would keep and do), and norm(x) is never materialised.
// residual (with relu): y = relu(norm(x) + residual); its gradient is the masked dy.
Tensor batch_norm_impl(const char* name, const Tensor& x_in, const Tensor& w_in, const Tensor& b_in,
                       const Tensor& running_mean, const Tensor& running_var, const Tensor& num_batches_tracked,
                       bool training, double momentum, double eps, ImageLayout layout, bool relu,
                       const Tensor& residual_in = Tensor()) {
  OpNameScope op(name);
  Device dev = common_device(name, {x_in, w_in, b_in, running_mean, running_var, num_batches_tracked, residual_in});
  check_floating(name, x_in);
  const bool cl = layout == ImageLayout::NHWC;
  check_rank(name, x_in, 4, cl ? "input [N, H, W, C]" : "input [N, C, H, W]");
  const ImageDims xd = image_dims(x_in.shape(), cl);
  LT_CHECK(w_in.defined() && b_in.defined(), "batch_norm: no weight or bias", "the kernels take an affine norm",
           "pass ones([C]) and zeros([C]) for none");
  check_channel_vector(x_in, xd.c, w_in, "weight");
  check_channel_vector(x_in, xd.c, b_in, "bias");
  check_same_dtype(name, w_in, b_in);
  LT_CHECK(running_mean.defined() == running_var.defined(), "batch_norm: only one of running_mean, running_var given",
           "they are updated and read together", "pass both or neither");
  if (running_mean.defined()) {
    check_channel_vector(x_in, xd.c, running_mean, "running_mean");
    check_channel_vector(x_in, xd.c, running_var, "running_var");
    check_same_dtype(name, running_mean, running_var);
    check_same_dtype(name, w_in, running_mean);
  }
  LT_CHECK(training || running_mean.defined(), "batch_norm: eval mode without running statistics",
           "eval normalises with running_mean and running_var", "pass them, or normalise with training = true");
  LT_CHECK(!num_batches_tracked.defined() || (num_batches_tracked.dtype() == DType::I64 && num_batches_tracked.numel() == 1),
           "batch_norm: num_batches_tracked is a " + std::string(dtype_name(num_batches_tracked.dtype())) + " " +
               shape_str(num_batches_tracked.shape()),
           "it is torch's i64 scalar counter", "pass an i64 tensor of shape []");
  const int64_t per_channel = xd.n * xd.h * xd.w;
  LT_CHECK(!training || per_channel > 1,
           "batch_norm: training on input " + shape_str(x_in.shape()) + " has " + std::to_string(per_channel) +
               " value per channel",
           "the batch variance needs more than one", "train with a larger batch or larger images, or use eval mode");
  LT_CHECK(momentum >= 0 && momentum <= 1 && eps > 0,
           "batch_norm: momentum " + std::to_string(momentum) + ", eps " + std::to_string(eps),
           "momentum is in [0, 1] and eps positive", "fix the layer's arguments");
  LT_CHECK(!residual_in.defined() || (residual_in.shape() == x_in.shape() && residual_in.dtype() == x_in.dtype()),
           std::string(name) + ": the residual is a " + dtype_name(residual_in.dtype()) + " " +
               shape_str(residual_in.shape()) + ", the input a " + dtype_name(x_in.dtype()) + " " +
               shape_str(x_in.shape()),
           "it is added to the norm's output elementwise", "pass a residual shaped and typed as the input");
  Tensor x = contiguous(x_in), w = contiguous(w_in), b = contiguous(b_in);
  const Tensor residual = residual_in.defined() ? contiguous(residual_in) : Tensor();
  const int64_t C = xd.c;
  const DType aux = aux_dtype(x.dtype());
  Tensor y = Tensor::empty(x.shape(), x.dtype(), dev);
  Tensor mean = Tensor::empty({C}, aux, dev), invstd = Tensor::empty({C}, aux, dev);
  // A recomputation (activation checkpointing) normalises the same batch again: same statistics,
  // but the running ones were already updated by the forward.
  const bool update = training && running_mean.defined() && !recomputing_checkpoint();
  const BatchNormArgs args{training, float(momentum), float(eps), cl, relu};
  // The running statistics go to the kernel when it reads them (eval) or updates them.
  const bool pass_running = !training || update;
  {
    // Eval reads the running statistics: no sums, so no scratch.
    Tensor partials = training ? partials_for(xd, cl, dev) : Tensor();
    backend_for(dev).batchnorm_fwd(y, mean, invstd, x, w, b, pass_running ? running_mean : Tensor(),
                                   pass_running ? running_var : Tensor(), update ? num_batches_tracked : Tensor(),
                                   residual, args, partials);
  }
  const bool has_residual = residual.defined();
  if (!needs_grad({x, w, b, residual})) return y;
  const bool need_x = x.requires_grad(), need_w = w.requires_grad(), need_b = b.requires_grad();
  const bool need_r = has_residual && residual.requires_grad();
  SavedTensor saved_x(x), saved_w(w), saved_mean(mean), saved_invstd(invstd), saved_y(relu ? y.detach() : Tensor());
  std::vector<Tensor> inputs{x, w, b};
  if (has_residual) inputs.push_back(residual);
  record(y, name, inputs, [=](const Tensor& g_in) {
    Tensor g = contiguous_data(g_in), sx = saved_x.unpack(), sw = saved_w.unpack();
    Tensor dx = need_x ? Tensor::empty(sx.shape(), g.dtype(), g.device()) : Tensor();
    Tensor dw = need_w ? Tensor::empty({C}, sw.dtype(), g.device()) : Tensor();
    Tensor db = need_b ? Tensor::empty({C}, sw.dtype(), g.device()) : Tensor();
    Tensor partials = partials_for(xd, cl, g.device());
    if (relu && (has_residual || knob_int("LEANTRAIN_BN_RELU") != 2)) {
      // The ReLU's mask by its own kernel into a new gradient (what the ReLU's node allocates
      // unfused), then the plain norm backward: its passes read two tensors, not three. With a
      // residual that gradient is also the residual's (add's backward passes it on).
      Tensor gm = Tensor::empty(g.shape(), g.dtype(), g.device());
      backend_of(g).unary_backward(UnaryOp::Relu, gm, g, saved_y.unpack(), 0.f);
      BatchNormArgs plain = args;
      plain.relu = false;
      backend_of(g).batchnorm_bwd(dx, dw, db, gm, sx, sw, saved_mean.unpack(), saved_invstd.unpack(), Tensor(), plain,
                                  partials);
      if (has_residual) return std::vector<Tensor>{dx, dw, db, need_r ? gm : Tensor()};
      return std::vector<Tensor>{dx, dw, db};
    }
    backend_of(g).batchnorm_bwd(dx, dw, db, g, sx, sw, saved_mean.unpack(), saved_invstd.unpack(), saved_y.unpack(),
                                args, partials);
    return std::vector<Tensor>{dx, dw, db};
  });
  return y;
}

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& running_mean,
                  const Tensor& running_var, const Tensor& num_batches_tracked, bool training, double momentum,
                  double eps, ImageLayout layout) {
  return batch_norm_impl("batch_norm", x, w, b, running_mean, running_var, num_batches_tracked, training, momentum,
                         eps, layout, false);
}

Tensor batch_norm_relu(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& running_mean,
                       const Tensor& running_var, const Tensor& num_batches_tracked, bool training, double momentum,
                       double eps, ImageLayout layout) {
  return batch_norm_impl("batch_norm_relu", x, w, b, running_mean, running_var, num_batches_tracked, training,
                         momentum, eps, layout, true);
}

Tensor batch_norm_add_relu(const Tensor& x, const Tensor& residual, const Tensor& w, const Tensor& b,
                           const Tensor& running_mean, const Tensor& running_var, const Tensor& num_batches_tracked,
                           bool training, double momentum, double eps, ImageLayout layout) {
  LT_CHECK(residual.defined(), "batch_norm_add_relu: no residual", "it adds one to the norm's output",
           "pass the block's shortcut, or call batch_norm_relu");
  return batch_norm_impl("batch_norm_add_relu", x, w, b, running_mean, running_var, num_batches_tracked, training,
                         momentum, eps, layout, true, residual);
}

}  // namespace lt
