// ResNet as torchvision builds it (resnet18/34: BasicBlock; resnet50/101/152: Bottleneck with the
// stride on its 3x3 conv, "v1.5"), with torchvision's module and parameter names (conv1, bn1,
// layer1.0.conv1, layer1.0.downsample.0, ..., fc), so its state dicts load by name. The config
// reads Hugging Face ResNetConfig's keys (depths, layer_type, embedding_size, hidden_sizes).
#pragma once
#include <string>
#include <vector>

#include "leantrain/models.h"
#include "leantrain/nn_vision.h"

namespace lt::models {

struct ResNetConfig {
  std::string layer_type = "bottleneck";                     // "basic" (expansion 1) or "bottleneck" (4)
  std::vector<int64_t> depths = {3, 4, 6, 3};                // blocks per stage (torchvision's `layers`)
  int64_t embedding_size = 64;                               // the stem's width (conv1's out channels)
  std::vector<int64_t> hidden_sizes = {256, 512, 1024, 2048};  // each stage's output channels
  int64_t num_channels = 3, num_labels = 1000, image_size = 224;
  // leantrain's own key: run the activations channels-last (NHWC), as torch's channels_last, so
  // cuDNN takes tensor-core convolutions; the parameters keep torchvision's shapes either way.
  // Written to config.json only when false.
  bool channels_last = true;

  static std::vector<std::string> preset_names();  // resnet-tiny, resnet18, resnet34, resnet50, resnet101, resnet152
  static ResNetConfig preset(const std::string& name);
  static ResNetConfig from_json(const std::string& text);  // model_type "resnet"; missing keys keep defaults
  std::string to_json() const;
  void validate() const;  // one lt::Error line naming the bad field
  int64_t expansion() const { return layer_type == "basic" ? 1 : 4; }
  double num_parameters() const;  // closed form, from the fields alone
};

// torchvision.models.ResNet: conv1, bn1, relu, maxpool, layer1..layer4 (Sequential of blocks,
// children "0", "1", ...), average pool, fc.
class ResNet : public Model {
 public:
  ResNet(const ResNetConfig& cfg, const nn::InitOptions& init);
  const char* type_name() const override { return "ResNet"; }
  // images [B, num_channels, H, W] (any floating dtype; cast to the compute dtype, then stored
  // NHWC when channels_last) -> [B, classes]
  Tensor forward(const Tensor& images, const nn::TokenMask& mask = {}) override;
  std::string model_type() const override { return "resnet"; }
  std::string config_json() const override { return cfg_.to_json(); }
  const ResNetConfig& config() const { return cfg_; }

 private:
  ResNetConfig cfg_;
  std::shared_ptr<nn::Conv2d> conv1_;
  std::shared_ptr<nn::BatchNorm2d> bn1_;
  std::shared_ptr<nn::Relu> relu_;
  std::shared_ptr<nn::MaxPool2d> maxpool_;
  std::vector<std::shared_ptr<nn::Sequential>> layers_;
  std::shared_ptr<nn::Linear> fc_;
};

}  // namespace lt::models
