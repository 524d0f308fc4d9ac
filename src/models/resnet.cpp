// ResNet's blocks and model (models/resnet.h). Initialisation as torchvision's: convs kaiming
// normal with fan_out (std sqrt(2 / (out * k * k))), norms weight 1 bias 0, fc torch.nn.Linear's
// default (uniform in +-1/sqrt(in), weight and bias).
#include "models/resnet.h"

#include <cmath>
#include <typeinfo>

#include "core/knobs.h"
#include "leantrain/autocast.h"
#include "leantrain/error.h"

namespace lt::models {

namespace {

std::shared_ptr<nn::Conv2d> conv(nn::ParamFactory& pf, int64_t in, int64_t out, int64_t k, int64_t stride,
                                 ImageLayout layout) {
  const double std = std::sqrt(2.0 / double(out * k * k));
  return std::make_shared<nn::Conv2d>(pf, in, out, k,
                                      nn::Conv2dOptions{.stride = stride,
                                                        .padding = k / 2,
                                                        .weight_init = nn::Init::normal(std),
                                                        .layout = layout});
}

std::shared_ptr<nn::BatchNorm2d> norm(nn::ParamFactory& pf, int64_t channels, ImageLayout layout) {
  return std::make_shared<nn::BatchNorm2d>(pf, channels, 1e-5, 0.1, layout);
}

// The shortcut's 1x1 conv and norm when the block changes the shape, else null (identity).
std::shared_ptr<nn::Sequential> downsample(nn::ParamFactory& pf, int64_t in, int64_t out, int64_t stride,
                                           ImageLayout layout) {
  if (stride == 1 && in == out) return nullptr;
  auto d = std::make_shared<nn::Sequential>();
  d->append(conv(pf, in, out, 1, stride, layout));
  d->append(norm(pf, out, layout));
  return d;
}

// bn then relu as one op (batch_norm_relu: a pass over the activations fewer each way, the same
// bits) where both are the plain modules; a forward wrapper on either (checkpointing, offload, the
// profiler's call recording) or a replaced module runs them one by one.
bool fusable(nn::UnaryModule& bn, nn::UnaryModule& relu) {
  return knob_int("LEANTRAIN_BN_RELU") != 0 && typeid(bn) == typeid(nn::BatchNorm2d) && !bn.forward_wrapper() &&
         typeid(relu) == typeid(nn::Relu) && !relu.forward_wrapper();
}

Tensor norm_relu(nn::UnaryModule& bn, nn::UnaryModule& relu, const Tensor& x) {
  if (fusable(bn, relu)) return static_cast<nn::BatchNorm2d&>(bn).forward_relu(x);
  return relu(bn(x));
}

// relu(bn(x) + shortcut) likewise (batch_norm_add_relu), where the shortcut matches the norm's output.
Tensor norm_add_relu(nn::UnaryModule& bn, nn::UnaryModule& relu, const Tensor& x, const Tensor& shortcut) {
  if (fusable(bn, relu) && shortcut.shape() == x.shape() && shortcut.dtype() == x.dtype())
    return static_cast<nn::BatchNorm2d&>(bn).forward_add_relu(x, shortcut);
  return relu(add(bn(x), shortcut));
}

// relu(body(x) + shortcut(x)): both block kinds, their children named as torchvision's.
class ResidualBlock : public nn::UnaryModule {
 public:
  Tensor forward(const Tensor& x) override {
    Tensor h = x;
    for (size_t i = 0; i + 1 < convs_.size(); ++i) h = norm_relu(*norms_[i], *relu_, (*convs_[i])(h));
    h = (*convs_.back())(h);
    // The last norm, an identity shortcut and the ReLU as one op only under LEANTRAIN_BN_RELU=3:
    // its backward must allocate the masked gradient (the shortcut's) while the incoming one is
    // alive, which raised the planned peak of resnet152 and resnet18 at B32 (+13 MB allocated,
    // +109 MB reserved) although it was the fastest form. With a downsample it would also hand the
    // last norm's input gradient out before the downsample's backward runs (+16.6 MB).
    if (!downsample_ && knob_int("LEANTRAIN_BN_RELU") == 3) return norm_add_relu(*norms_.back(), *relu_, h, x);
    Tensor n = (*norms_.back())(h);
    return (*relu_)(add(n, downsample_ ? (*downsample_)(x) : x));
  }

 protected:
  explicit ResidualBlock(ImageLayout layout) : layout_(layout) {}
  void add_conv(const std::string& n, nn::ParamFactory& pf, int64_t in, int64_t out, int64_t k, int64_t stride) {
    convs_.push_back(register_child<nn::UnaryModule>("conv" + n, conv(pf, in, out, k, stride, layout_)));
    norms_.push_back(register_child<nn::UnaryModule>("bn" + n, norm(pf, out, layout_)));
  }
  void add_relu() { relu_ = register_child<nn::UnaryModule>("relu", std::make_shared<nn::Relu>()); }
  void add_downsample(std::shared_ptr<nn::Sequential> d) {
    if (d) downsample_ = register_child<nn::UnaryModule>("downsample", std::move(d));
  }

 private:
  ImageLayout layout_;
  std::vector<nn::Child<nn::UnaryModule>> convs_, norms_;
  nn::Child<nn::UnaryModule> relu_, downsample_;
};

// torchvision's BasicBlock: conv1 (3x3, stride), bn1, relu, conv2 (3x3), bn2, downsample.
class BasicBlock final : public ResidualBlock {
 public:
  BasicBlock(nn::ParamFactory& pf, int64_t in, int64_t planes, int64_t stride, ImageLayout layout)
      : ResidualBlock(layout) {
    add_conv("1", pf, in, planes, 3, stride);
    add_relu();
    add_conv("2", pf, planes, planes, 3, 1);
    add_downsample(downsample(pf, in, planes, stride, layout));
  }
  const char* type_name() const override { return "BasicBlock"; }
};

// torchvision's Bottleneck (v1.5: the stride on conv2): conv1 (1x1), bn1, conv2 (3x3, stride),
// bn2, conv3 (1x1, to 4 x planes), bn3, relu, downsample.
class Bottleneck final : public ResidualBlock {
 public:
  Bottleneck(nn::ParamFactory& pf, int64_t in, int64_t planes, int64_t out, int64_t stride, ImageLayout layout)
      : ResidualBlock(layout) {
    add_conv("1", pf, in, planes, 1, 1);
    add_conv("2", pf, planes, planes, 3, stride);
    add_conv("3", pf, planes, out, 1, 1);
    add_relu();
    add_downsample(downsample(pf, in, out, stride, layout));
  }
  const char* type_name() const override { return "Bottleneck"; }
};

}  // namespace

ResNet::ResNet(const ResNetConfig& cfg, const nn::InitOptions& init) : cfg_(cfg) {
  cfg_.validate();
  nn::ParamFactory pf(init);
  const int64_t E = cfg_.embedding_size;
  const ImageLayout layout = cfg_.channels_last ? ImageLayout::NHWC : ImageLayout::NCHW;
  conv1_ = register_module("conv1", conv(pf, cfg_.num_channels, E, 7, 2, layout));
  bn1_ = register_module("bn1", norm(pf, E, layout));
  relu_ = register_module("relu", std::make_shared<nn::Relu>());
  maxpool_ = register_module("maxpool", std::make_shared<nn::MaxPool2d>(3, 2, 1, layout));
  int64_t in = E;
  for (size_t s = 0; s < cfg_.depths.size(); ++s) {
    const int64_t out = cfg_.hidden_sizes[s], planes = out / cfg_.expansion();
    auto stage = std::make_shared<nn::Sequential>();
    for (int64_t b = 0; b < cfg_.depths[s]; ++b) {
      const int64_t stride = s > 0 && b == 0 ? 2 : 1;
      if (cfg_.layer_type == "basic") stage->append(std::make_shared<BasicBlock>(pf, in, planes, stride, layout));
      else stage->append(std::make_shared<Bottleneck>(pf, in, planes, out, stride, layout));
      in = out;
    }
    layers_.push_back(register_module("layer" + std::to_string(s + 1), stage));
  }
  const double bound = 1.0 / std::sqrt(double(in));
  fc_ = register_module("fc", std::make_shared<nn::Linear>(pf, in, cfg_.num_labels,
                                                           nn::LinearOptions{.weight_init = nn::Init::uniform(bound),
                                                                             .bias_init = nn::Init::uniform(bound)}));
  pf.materialize();
}

Tensor ResNet::forward(const Tensor& images_in, const nn::TokenMask& mask) {
  LT_CHECK(!mask.key_padding.defined() && !mask.doc_pos.defined(), "ResNet forward: a mask was given", "a ResNet reads whole images", "pass no mask");
  LT_CHECK(images_in.dim() == 4 && images_in.size(1) == cfg_.num_channels,
           "ResNet input: images have shape " + shape_str(images_in.shape()),
           "expected [B, " + std::to_string(cfg_.num_channels) + ", H, W] (num_channels " +
               std::to_string(cfg_.num_channels) + ")",
           "convert the images or set num_channels in the config");
  const DType dt = autocast_dtype().value_or(fc_->weight().dtype());
  Tensor x = images_in.dtype() == dt ? images_in : cast(images_in, dt);
  if (cfg_.channels_last) x = contiguous(permute(x, {0, 2, 3, 1}));
  x = (*maxpool_)(norm_relu(*bn1_, *relu_, (*conv1_)(x)));
  for (auto& stage : layers_) x = (*stage)(x);
  // adaptive average pooling to 1x1, flattened
  return (*fc_)(cfg_.channels_last ? mean(x, {1, 2}) : mean(x, {2, 3}));
}

}  // namespace lt::models
