// Convolutional layers over NCHW or NHWC images (the layout each layer is built with; the
// parameters keep torch's shapes in both), with torch.nn's names: Conv2d (weight, bias),
// BatchNorm2d (weight, bias; buffers running_mean, running_var, num_batches_tracked), MaxPool2d,
// ReLU, and Sequential-like stages whose children are "0", "1", ... (torchvision's ResNet).
#pragma once
#include <memory>

#include "leantrain/nn.h"

namespace lt::nn {

struct Conv2dOptions {
  int64_t stride = 1, padding = 0;
  bool bias = false;
  Init weight_init = Init::normal(0.02);
  ImageLayout layout = ImageLayout::NCHW;
};

// torch.nn.Conv2d (dilation 1, groups 1): weight [out, in, k, k], bias [out] when asked for.
class Conv2d : public UnaryModule {
 public:
  Conv2d(ParamFactory& pf, int64_t in, int64_t out, int64_t kernel, const Conv2dOptions& o = {});
  const char* type_name() const override { return "Conv2d"; }
  Tensor forward(const Tensor& x) override;
  int64_t in_channels() const { return in_; }
  int64_t out_channels() const { return out_; }
  // Forward FLOPs for an input of shape [N, C, H, W] (NHWC: [N, H, W, C]): 2 per multiply-add
  // of every output pixel.
  double forward_flops(const Shape& in) const;

 private:
  int64_t in_, out_, stride_, padding_;
  ImageLayout layout_;
  Tensor* weight_ = nullptr;
  Tensor* bias_ = nullptr;
};

// torch.nn.BatchNorm2d (affine, track_running_stats): batch statistics in training mode, which
// also update the running ones (lt::batch_norm); running statistics in eval mode. The weight,
// bias and running statistics keep the parameters' dtype (f32 under mixed precision).
class BatchNorm2d : public UnaryModule {
 public:
  BatchNorm2d(ParamFactory& pf, int64_t channels, double eps = 1e-5, double momentum = 0.1,
              ImageLayout layout = ImageLayout::NCHW);
  const char* type_name() const override { return "BatchNorm2d"; }
  Tensor forward(const Tensor& x) override;
  // relu(forward(x)) as one op (lt::batch_norm_relu), bypassing any forward wrapper: callers
  // use it where neither this module nor the relu has one.
  Tensor forward_relu(const Tensor& x);
  // relu(forward(x) + residual) as one op (lt::batch_norm_add_relu), likewise.
  Tensor forward_add_relu(const Tensor& x, const Tensor& residual);
  // Set to zeros: torchvision's zero_init_residual for a block's last norm.
  const Tensor& weight() const { return *weight_; }

 private:
  double eps_, momentum_;
  ImageLayout layout_;
  Tensor* weight_ = nullptr;
  Tensor* bias_ = nullptr;
  Tensor* running_mean_ = nullptr;
  Tensor* running_var_ = nullptr;
  Tensor* num_batches_tracked_ = nullptr;
};

class MaxPool2d : public UnaryModule {
 public:
  MaxPool2d(int64_t kernel, int64_t stride, int64_t padding, ImageLayout layout = ImageLayout::NCHW)
      : kernel_(kernel), stride_(stride), padding_(padding), layout_(layout) {}
  const char* type_name() const override { return "MaxPool2d"; }
  Tensor forward(const Tensor& x) override { return max_pool2d(x, kernel_, stride_, padding_, layout_); }

 private:
  int64_t kernel_, stride_, padding_;
  ImageLayout layout_;
};

class Relu : public UnaryModule {
 public:
  const char* type_name() const override { return "ReLU"; }
  Tensor forward(const Tensor& x) override { return relu(x); }
};

// torch.nn.Sequential of unary modules, children "0", "1", ...: one call, so a checkpoint
// regex may select it (a ResNet stage, "layer1").
class Sequential : public UnaryModule {
 public:
  const char* type_name() const override { return "Sequential"; }
  void append(std::shared_ptr<UnaryModule> m);
  size_t size() const { return items_.size(); }
  Tensor forward(const Tensor& x) override;

 private:
  std::vector<Child<UnaryModule>> items_;
};

}  // namespace lt::nn
