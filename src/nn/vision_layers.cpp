// Conv2d, BatchNorm2d and Sequential (nn_vision.h).
#include "leantrain/autocast.h"
#include "leantrain/nn_vision.h"

namespace lt::nn {

Conv2d::Conv2d(ParamFactory& pf, int64_t in, int64_t out, int64_t kernel, const Conv2dOptions& o)
    : in_(in), out_(out), stride_(o.stride), padding_(o.padding), layout_(o.layout) {
  weight_ = &register_parameter("weight", pf.make({out, in, kernel, kernel}, o.weight_init));
  if (o.bias) bias_ = &register_parameter("bias", pf.make({out}, Init::zeros()));
}

Tensor Conv2d::forward(const Tensor& x) {
  return conv2d(x, autocast(*weight_), bias_ ? autocast(*bias_) : Tensor(), stride_, padding_, layout_);
}

double Conv2d::forward_flops(const Shape& in) const {
  if (in.size() != 4) return 0;
  const int64_t k = weight_->size(2);
  const bool cl = layout_ == ImageLayout::NHWC;
  const int64_t h = cl ? in[1] : in[2], w = cl ? in[2] : in[3];
  const double oh = double((h + 2 * padding_ - k) / stride_ + 1), ow = double((w + 2 * padding_ - k) / stride_ + 1);
  return 2 * double(in[0]) * oh * ow * double(out_) * double(in_) * double(k * k);
}

BatchNorm2d::BatchNorm2d(ParamFactory& pf, int64_t channels, double eps, double momentum, ImageLayout layout)
    : eps_(eps), momentum_(momentum), layout_(layout) {
  weight_ = &register_parameter("weight", pf.make({channels}, Init::ones()));
  bias_ = &register_parameter("bias", pf.make({channels}, Init::zeros()));
  running_mean_ = &register_buffer("running_mean", pf.make_buffer({channels}, Init::zeros()));
  running_var_ = &register_buffer("running_var", pf.make_buffer({channels}, Init::ones()));
  num_batches_tracked_ = &register_buffer("num_batches_tracked", pf.make_buffer({}, Init::zeros(), DType::I64));
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  // The affine parameters and statistics stay in their own dtype (f32 under autocast), as torch
  // runs batch norm on 16-bit activations.
  return batch_norm(x, *weight_, *bias_, *running_mean_, *running_var_, *num_batches_tracked_, is_training(),
                    momentum_, eps_, layout_);
}

Tensor BatchNorm2d::forward_add_relu(const Tensor& x, const Tensor& residual) {
  return batch_norm_add_relu(x, residual, *weight_, *bias_, *running_mean_, *running_var_, *num_batches_tracked_,
                             is_training(), momentum_, eps_, layout_);
}

Tensor BatchNorm2d::forward_relu(const Tensor& x) {
  return batch_norm_relu(x, *weight_, *bias_, *running_mean_, *running_var_, *num_batches_tracked_, is_training(),
                         momentum_, eps_, layout_);
}

void Sequential::append(std::shared_ptr<UnaryModule> m) {
  items_.push_back(register_child(std::to_string(items_.size()), std::move(m)));
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (const Child<UnaryModule>& m : items_) h = (*m)(h);
  return h;
}

}  // namespace lt::nn
