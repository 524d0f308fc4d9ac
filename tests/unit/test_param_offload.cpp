// --offload params (train/param_offload.*): the checkpointed blocks' weights rest in pinned host
// memory and come to the device per block. Losses and gradients bitwise those of checkpointing
// alone (GPT-2 tiny with dropout, two steps); the block weights rest as CPU tensors over pinned
// memory, the others stay on the device in storages of their own; on meta with the CUDA
// allocator simulated, the device holds the non-block weights plus at most two blocks during a
// step, the same bytes in two runs.
#include <gtest/gtest.h>

#include <algorithm>

#include "checkpoint_helpers.h"
#include "leantrain/checkpoint.h"
#include "memory/host_allocators.h"
#include "train/param_offload.h"

using namespace lt;
using namespace ckpt_test;

namespace {

struct Step {
  std::vector<uint32_t> loss;
  std::vector<std::pair<std::string, std::vector<uint32_t>>> grads;
};

std::vector<Step> gpt_steps(bool offload) {
  models::GPT2 m(gpt2_tiny_dropout(), {.seed = 3});
  nn::apply_checkpointing(m, "blocks");
  if (offload) {
    const std::vector<std::string> blocks = offload_block_parameters(m, Device::cpu());
    EXPECT_EQ(blocks.size(), size_t(gpt2_tiny_dropout().n_layer));
    for (auto& [name, p] : m.named_parameters()) {
      const bool in_block = name.find(".h.") != std::string::npos || name.rfind("h.", 0) == 0;
      const bool pinned = p.storage()->allocator == &pinned_host_allocator(Device::cpu());
      EXPECT_EQ(pinned, in_block) << name;
      EXPECT_EQ(p.storage()->nbytes(), p.nbytes()) << name << " still shares the parameter store";
    }
  }
  std::vector<Step> out;
  for (uint64_t s = 0; s < 2; ++s) {
    Tensor loss = m.loss(ids(2, 16, 256, 10 + s), ids(2, 16, 256, 20 + s));
    loss.backward();
    out.push_back({bits(loss), grad_bits(m)});
    zero_grad(m.parameters());
  }
  return out;
}

}  // namespace

TEST(ParamOffload, GradientsBitwiseEqualToCheckpointAlone) {
  const std::vector<Step> ref = gpt_steps(false), got = gpt_steps(true);
  ASSERT_EQ(ref.size(), got.size());
  for (size_t s = 0; s < ref.size(); ++s) {
    EXPECT_EQ(ref[s].loss, got[s].loss) << "step " << s;
    ASSERT_EQ(ref[s].grads.size(), got[s].grads.size());
    for (size_t i = 0; i < ref[s].grads.size(); ++i) {
      ASSERT_FALSE(ref[s].grads[i].second.empty()) << ref[s].grads[i].first;
      EXPECT_TRUE(ref[s].grads[i].second == got[s].grads[i].second) << "step " << s << ": " << ref[s].grads[i].first;
    }
  }
}

// The device's parameter bytes over one step, from the simulated allocator's history: at rest
// only the weights outside the blocks; at most two blocks more while the step runs.
TEST(ParamOffload, SimulatedCudaHoldsAtMostTwoBlocks) {
  auto run = [] {
    set_allocator(Device::meta(), make_simulated_cuda_allocator());
    Allocator& a = allocator_for(Device::meta());
    int64_t rest = 0, most = 0, block = 0, all = 0;
    {
      models::GPT2Config c = gpt2_tiny_dropout();
      c.n_layer = 4;
      models::GPT2 m(c, {.device = Device::meta(), .seed = 3});
      all = a.stats().category[size_t(Category::Parameter)].current;
      nn::apply_checkpointing(m, "blocks");
      offload_block_parameters(m, Device::meta());
      for (auto& [name, p] : m.named_parameters())
        if (name.find("h.0.") != std::string::npos) block += nn::ParamFactory::flat_bytes(p.shape(), p.dtype());
      rest = a.stats().category[size_t(Category::Parameter)].current;
      a.set_history(true);
      Tensor loss = m.loss(ids(2, 16, 256, 10, Device::meta()), ids(2, 16, 256, 20, Device::meta()));
      loss.backward();
      int64_t cur = rest;
      for (const MemoryEvent& e : a.history()) {
        if (e.category != Category::Parameter) continue;
        if (e.action == MemoryEvent::Action::Alloc) cur += e.size;
        if (e.action == MemoryEvent::Action::Free) cur -= e.size;
        most = std::max(most, cur);
      }
      a.set_history(false);
    }
    dynamic_cast<SimulatedCudaAllocator&>(a).release_gemm_workspace();
    set_allocator(Device::meta(), std::make_unique<MetaAllocator>());
    EXPECT_GT(block, 0);
    EXPECT_LT(rest + 4 * block, all + 1);  // the four blocks left the device
    EXPECT_GE(most, rest + 2 * block);     // a block in use and the next one on its way
    EXPECT_LE(most, rest + 2 * block);     // never more
    return std::make_pair(rest, most);
  };
  EXPECT_EQ(run(), run());  // program order only: the same bytes twice
}
