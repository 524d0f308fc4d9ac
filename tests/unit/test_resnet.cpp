// ResNet: torchvision's names, shapes and parameter counts (built on meta: no memory), the
// config's presets, config.json and refusals, train vs eval on the CPU, checkpointing by module
// path (same gradients, running statistics updated once), channels-last activations (the
// default) against NCHW ones (the same bits on the CPU), and the meta allocation trace of a
// training step equal to the CPU's.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "checkpoint_helpers.h"
#include "leantrain/autocast.h"
#include "leantrain/checkpoint.h"
#include "leantrain/error.h"
#include "models/registry.h"
#include "models/resnet.h"
#include "unit/error_of.h"

using namespace lt;
using lt::test::error_of;
using models::ResNet;
using models::ResNetConfig;

namespace {

std::map<std::string, Shape> shapes_of(const nn::Module& m) {
  std::map<std::string, Shape> s;
  for (auto& [n, t] : m.named_parameters()) s[n] = t.shape();
  for (auto& [n, t] : m.named_buffers()) s[n] = t.shape();
  return s;
}

TEST(ResNet, Resnet18NamesAndShapesAreTorchvisions) {
  ResNet m(ResNetConfig::preset("resnet18"), {.device = Device::meta()});
  EXPECT_EQ(m.num_parameters(), 11689512);
  EXPECT_EQ(ResNetConfig::preset("resnet18").num_parameters(), 11689512.0);
  const auto s = shapes_of(m);
  const std::map<std::string, Shape> expected{
      {"conv1.weight", {64, 3, 7, 7}},
      {"bn1.weight", {64}},
      {"bn1.running_mean", {64}},
      {"bn1.num_batches_tracked", {}},
      {"layer1.0.conv1.weight", {64, 64, 3, 3}},
      {"layer1.1.bn2.running_var", {64}},
      {"layer2.0.conv1.weight", {128, 64, 3, 3}},
      {"layer2.0.downsample.0.weight", {128, 64, 1, 1}},
      {"layer2.0.downsample.1.running_mean", {128}},
      {"layer4.1.conv2.weight", {512, 512, 3, 3}},
      {"fc.weight", {1000, 512}},
      {"fc.bias", {1000}}};
  for (auto& [name, shape] : expected) {
    ASSERT_TRUE(s.count(name)) << name;
    EXPECT_EQ(s.at(name), shape) << name;
  }
  EXPECT_FALSE(s.count("layer1.0.downsample.0.weight"));  // the first stage keeps its shape
  EXPECT_EQ(m.named_parameters().size(), 62u);            // as torchvision's named_parameters()
  EXPECT_EQ(m.named_buffers().size(), 60u);               // 20 norms x 3
  EXPECT_EQ(m.named_parameters().front().first, "conv1.weight");
}

TEST(ResNet, Resnet50And152NamesShapesAndCounts) {
  ResNet m(ResNetConfig::preset("resnet50"), {.device = Device::meta()});
  EXPECT_EQ(m.num_parameters(), 25557032);
  EXPECT_EQ(ResNetConfig::preset("resnet50").num_parameters(), 25557032.0);
  const auto s = shapes_of(m);
  const std::map<std::string, Shape> expected{{"layer1.0.conv1.weight", {64, 64, 1, 1}},
                                              {"layer1.0.conv2.weight", {64, 64, 3, 3}},
                                              {"layer1.0.conv3.weight", {256, 64, 1, 1}},
                                              {"layer1.0.downsample.0.weight", {256, 64, 1, 1}},
                                              {"layer2.0.conv2.weight", {128, 128, 3, 3}},
                                              {"layer3.5.bn3.weight", {1024}},
                                              {"layer4.2.bn3.num_batches_tracked", {}},
                                              {"fc.weight", {1000, 2048}}};
  for (auto& [name, shape] : expected) {
    ASSERT_TRUE(s.count(name)) << name;
    EXPECT_EQ(s.at(name), shape) << name;
  }
  EXPECT_EQ(m.named_parameters().size(), 161u);
  ResNet big(ResNetConfig::preset("resnet152"), {.device = Device::meta()});
  EXPECT_EQ(big.num_parameters(), 60192808);
  EXPECT_EQ(ResNetConfig::preset("resnet152").num_parameters(), 60192808.0);
  EXPECT_EQ(ResNetConfig::preset("resnet34").num_parameters(), 21797672.0);
  EXPECT_EQ(ResNetConfig::preset("resnet101").num_parameters(), 44549160.0);
}

TEST(ResNet, ConfigJsonRoundTripAndRefusals) {
  ResNetConfig c = ResNetConfig::preset("resnet-tiny");
  ResNetConfig back = ResNetConfig::from_json(c.to_json());
  EXPECT_EQ(back.depths, c.depths);
  EXPECT_EQ(back.hidden_sizes, c.hidden_sizes);
  EXPECT_EQ(back.layer_type, "basic");
  EXPECT_EQ(back.num_channels, 1);
  EXPECT_TRUE(back.channels_last) << "channels-last is the default";
  EXPECT_EQ(c.to_json().find("channels_last"), std::string::npos) << "only written when false";
  c.channels_last = false;
  EXPECT_FALSE(ResNetConfig::from_json(c.to_json()).channels_last);
  c.channels_last = true;
  // Hugging Face's microsoft/resnet-50 keys
  ResNetConfig hf = ResNetConfig::from_json(
      R"({"model_type": "resnet", "depths": [3, 4, 6, 3], "embedding_size": 64, "hidden_sizes": [256, 512, 1024, 2048],
          "layer_type": "bottleneck", "num_channels": 3, "hidden_act": "relu", "downsample_in_first_stage": false,
          "id2label": {"0": "a", "1": "b"}})");
  EXPECT_EQ(hf.num_labels, 2);
  EXPECT_EQ(hf.num_parameters(), 25557032.0 - 2048.0 * 998 - 998);
  for (const char* bad : {R"({"model_type": "resnet", "layer_type": "dense"})",
                          R"({"model_type": "resnet", "depths": [2, 2], "hidden_sizes": [64, 128, 256]})",
                          R"({"model_type": "resnet", "hidden_sizes": [250, 512, 1024, 2048]})",
                          R"({"model_type": "resnet", "depths": [3, 0, 6, 3]})",
                          R"({"model_type": "resnet", "depths": "3463"})",
                          R"({"model_type": "resnet", "num_channels": 0})",
                          R"({"model_type": "resnet", "hidden_act": "gelu"})",
                          R"({"model_type": "resnet", "depths": [3, 4, 6, 30000000]})",
                          R"({"model_type": "vit"})"}) {
    const std::string e = error_of([&] { ResNetConfig::from_json(bad); });
    EXPECT_NE(e, "") << bad;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  // Through the registry: model_type picks the family; size flags are refused.
  auto spec = models::config_from_json(c.to_json());
  EXPECT_EQ(spec->family().model_type(), "resnet");
  EXPECT_NE(error_of([&] { spec->apply_overrides({.dim = 64}); }), "");
  EXPECT_EQ(models::config_from_preset("resnet50")->images().patch, 1);
}

Tensor tiny_images(int64_t B, uint64_t seed, int64_t channels = 1) {
  Generator g(seed);
  return randn({B, channels, 28, 28}, g);
}

TEST(ResNet, TinyTrainsAndEvalUsesRunningStatistics) {
  ResNet m(ResNetConfig::preset("resnet-tiny"), {.seed = 1});
  EXPECT_NEAR(double(m.num_parameters()), ResNetConfig::preset("resnet-tiny").num_parameters(), 0);
  Tensor x = tiny_images(4, 2);
  Tensor y = m.forward(x);
  EXPECT_EQ(y.shape(), (Shape{4, 10}));
  Tensor rm = m.find_module("bn1")->named_buffers()[0].second;
  const std::vector<double> after_train = rm.to_double_vector();
  EXPECT_NE(after_train, std::vector<double>(16, 0.0)) << "training updates the running mean";
  m.eval();
  Tensor ye;
  {
    NoGradGuard ng;
    ye = m.forward(x);
  }
  EXPECT_EQ(rm.to_double_vector(), after_train) << "eval leaves the running statistics";
  EXPECT_NE(ye.to_double_vector(), y.to_double_vector()) << "eval normalises with other statistics";
  // The wrong channel count is one line naming the shape.
  const std::string e = error_of([&] { m.forward(tiny_images(2, 3, 3)); });
  EXPECT_NE(e.find("[2, 3, 28, 28]"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

using Grads = std::vector<std::pair<std::string, std::vector<uint32_t>>>;

Grads tiny_grads(const std::string& spec, std::vector<double>* running_mean, double* tracked) {
  ResNet m(ResNetConfig::preset("resnet-tiny"), {.seed = 5});
  if (!spec.empty()) EXPECT_FALSE(nn::apply_checkpointing(m, spec).empty()) << spec;
  m.loss(tiny_images(3, 7), from_ints({1, 4, 9}, {3})).backward();
  for (auto& [n, t] : m.named_buffers()) {
    if (n == "layer1.0.bn1.running_mean") *running_mean = t.to_double_vector();
    if (n == "layer1.0.bn1.num_batches_tracked") *tracked = t.to_double_vector()[0];
  }
  return ckpt_test::grad_bits(m);
}

TEST(ResNet, CheckpointingStagesChangesNoGradientAndUpdatesStatisticsOnce) {
  std::vector<double> rm_ref, rm;
  double tracked_ref = 0, tracked = 0;
  const Grads ref = tiny_grads("", &rm_ref, &tracked_ref);
  EXPECT_EQ(tracked_ref, 1.0);
  for (const std::string spec : {"layer1", "layer(1|2)", "layer[0-9]\\.0", "layer1\\.0\\.bn1"}) {
    const Grads got = tiny_grads(spec, &rm, &tracked);
    ASSERT_EQ(ref.size(), got.size());
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_TRUE(ref[i] == got[i]) << spec << ": " << ref[i].first;
    EXPECT_EQ(rm, rm_ref) << spec;
    EXPECT_EQ(tracked, 1.0) << spec;
  }
}

TEST(ResNet, ChannelsLastGivesTheSameBitsAsNchw) {
  // basic blocks (resnet-tiny) and bottlenecks with a strided shortcut, f32 and bf16 autocast
  ResNetConfig basic = ResNetConfig::preset("resnet-tiny");
  ResNetConfig bottleneck = ResNetConfig::from_json(
      R"({"model_type": "resnet", "layer_type": "bottleneck", "depths": [1, 2], "embedding_size": 8,
          "hidden_sizes": [16, 32], "num_channels": 3, "num_labels": 5})");
  for (const ResNetConfig& base : {basic, bottleneck})
    for (bool bf16 : {false, true}) {
      SCOPED_TRACE(base.layer_type + (bf16 ? " bf16" : " f32"));
      std::vector<double> logits[2];
      Grads grads[2];
      std::vector<double> running[2];
      for (bool cl : {false, true}) {
        ResNetConfig c = base;
        c.channels_last = cl;
        ResNet m(c, {.seed = 9});
        AutocastGuard ac(bf16 ? std::optional<DType>(DType::BF16) : std::nullopt);
        Tensor x = tiny_images(3, 11, c.num_channels);
        logits[cl] = m.forward(x).to_double_vector();
        m.loss(x, from_ints({1, 4, 2}, {3})).backward();
        grads[cl] = ckpt_test::grad_bits(m);
        running[cl] = m.named_buffers()[0].second.to_double_vector();
      }
      EXPECT_EQ(logits[1], logits[0]);
      ASSERT_EQ(grads[1].size(), grads[0].size());
      for (size_t i = 0; i < grads[0].size(); ++i) EXPECT_TRUE(grads[1][i] == grads[0][i]) << grads[0][i].first;
      EXPECT_EQ(running[1], running[0]);
    }
}

// LEANTRAIN_BN_RELU's fused forms (1, 2: norm + ReLU as one op; 3: also a block's last norm +
// identity shortcut + ReLU) give the separate ops' bits: logits, every gradient, running statistics.
TEST(ResNet, FusedNormReluModesGiveTheSameBits) {
  ResNetConfig bottleneck = ResNetConfig::from_json(
      R"({"model_type": "resnet", "layer_type": "bottleneck", "depths": [2, 2], "embedding_size": 8,
          "hidden_sizes": [16, 32], "num_channels": 3, "num_labels": 5})");
  for (const ResNetConfig& base : {ResNetConfig::preset("resnet-tiny"), bottleneck})
    for (bool bf16 : {false, true}) {
      SCOPED_TRACE(base.layer_type + (bf16 ? " bf16" : " f32"));
      std::vector<double> logits[4], running[4];
      Grads grads[4];
      for (int mode = 0; mode < 4; ++mode) {
        ::setenv("LEANTRAIN_BN_RELU", std::to_string(mode).c_str(), 1);
        ResNet m(base, {.seed = 9});
        AutocastGuard ac(bf16 ? std::optional<DType>(DType::BF16) : std::nullopt);
        Tensor x = tiny_images(3, 11, base.num_channels);
        logits[mode] = m.forward(x).to_double_vector();
        m.loss(x, from_ints({1, 4, 2}, {3})).backward();
        grads[mode] = ckpt_test::grad_bits(m);
        running[mode] = m.named_buffers()[0].second.to_double_vector();
        ::unsetenv("LEANTRAIN_BN_RELU");
      }
      for (int mode = 1; mode < 4; ++mode) {
        EXPECT_EQ(logits[mode], logits[0]) << "mode " << mode;
        ASSERT_EQ(grads[mode].size(), grads[0].size());
        for (size_t i = 0; i < grads[0].size(); ++i)
          EXPECT_TRUE(grads[mode][i] == grads[0][i]) << "mode " << mode << " " << grads[0][i].first;
        EXPECT_EQ(running[mode], running[0]) << "mode " << mode;
      }
    }
}

std::vector<MemoryEvent> step_trace(Device dev) {
  // The batch first, outside the trace (the CPU draws its values, meta has none).
  Tensor x = dev.is_cpu() ? tiny_images(2, 4) : empty({2, 1, 28, 28}, DType::F32, dev);
  Tensor t = dev.is_cpu() ? from_ints({3, 5}, {2}) : empty({2}, DType::I64, dev);
  Allocator& alloc = allocator_for(dev);
  alloc.clear_history();
  alloc.set_history(true);
  {
    ResNet m(ResNetConfig::preset("resnet-tiny"), {.device = dev, .seed = 2});
    nn::apply_checkpointing(m, "layer2");
    MemoryCategoryScope act(Category::Activation);
    for (int micro = 0; micro < 2; ++micro) m.loss(x, t).backward();
  }
  alloc.set_history(false);
  std::vector<MemoryEvent> trace = alloc.history();
  alloc.clear_history();
  return trace;
}

TEST(ResNet, MetaTraceOfATrainingStepMatchesCpu) {
  const std::vector<MemoryEvent> cpu = step_trace(Device::cpu()), meta = step_trace(Device::meta());
  ASSERT_GT(cpu.size(), 100u);
  bool workspace = false;
  for (size_t i = 0; i < std::min(cpu.size(), meta.size()); ++i) {
    const MemoryEvent &a = cpu[i], &b = meta[i];
    ASSERT_TRUE(a.action == b.action && a.size == b.size && a.category == b.category)
        << "event " << i << ": cpu " << action_name(a.action) << " " << a.size << " " << category_name(a.category)
        << " op " << a.op << "; meta " << action_name(b.action) << " " << b.size << " " << category_name(b.category)
        << " op " << b.op;
    workspace = workspace || a.category == Category::Workspace;
  }
  EXPECT_EQ(cpu.size(), meta.size());
  EXPECT_TRUE(workspace) << "the convolutions' cuDNN workspace is in the trace";
}

}  // namespace
