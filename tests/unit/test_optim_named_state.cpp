// Optimizer state keyed by parameter name: it survives a save and a resume into a freshly built
// model (other tensors, same names), a parameter swapped for another tensor (rebind), and it can
// be placed on a device other than the parameters'.
#include <gtest/gtest.h>

#include <filesystem>
#include <unistd.h>

#include "leantrain/error.h"
#include "leantrain/models.h"
#include "leantrain/optim.h"
#include "leantrain/safetensors.h"
#include "small_models.h"

using namespace lt;
using lt::test::small_gpt2;
using lt::test::small_vit;
namespace fs = std::filesystem;

namespace {

Tensor batch(int step) {
  std::vector<int64_t> v(2 * 8);
  for (size_t i = 0; i < v.size(); ++i) v[i] = int64_t((i * 5 + 3 * size_t(step) + 1) % 64);
  return from_ints(v, {2, 8});
}

std::unique_ptr<Optimizer> adamw(const models::Model& m) {
  OptimizerConfig oc;
  oc.lr = 1e-2;
  oc.weight_decay = 0.1;
  return make_optimizer(oc, decay_groups(m.named_trainable_parameters()));
}

void train_step(models::Model& m, Optimizer& opt, int step) {
  Tensor x = batch(step);
  m.loss(x, x).backward();
  opt.step();
  opt.zero_grad();
}

std::vector<std::vector<float>> values(const models::Model& m) {
  std::vector<std::vector<float>> out;
  for (auto& [n, p] : m.named_parameters()) out.push_back(p.to_float_vector());
  return out;
}

}  // namespace

// Train 3 steps, save weights and state to files, resume into a fresh model and optimizer:
// the 4th step equals the uninterrupted run's, bit for bit.
TEST(OptimNamedState, SurvivesSaveAndResumeIntoAFreshModel) {
  auto straight = std::make_shared<models::GPT2>(small_gpt2(), nn::InitOptions{.seed = 9});
  straight->set_trainable("transformer.wpe.weight", false);  // a frozen parameter is saved, has no state
  auto opt = adamw(*straight);
  for (int s = 0; s < 3; ++s) train_step(*straight, *opt, s);

  const fs::path dir = fs::temp_directory_path() / ("lt-named-state-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  io::save_module(*straight, (dir / "model.safetensors").string());
  OptimizerStateDict sd = opt->state_dict();
  EXPECT_TRUE(sd.tensors.count("transformer.h.0.attn.c_attn.weight.exp_avg"));  // the file format: by name
  EXPECT_FALSE(sd.tensors.count("transformer.wpe.weight.exp_avg"));
  io::save_safetensors((dir / "optimizer.safetensors").string(),
                       std::vector<std::pair<std::string, Tensor>>(sd.tensors.begin(), sd.tensors.end()), {});

  auto resumed = std::make_shared<models::GPT2>(small_gpt2(), nn::InitOptions{.seed = 1234});  // other values
  resumed->set_trainable("transformer.wpe.weight", false);
  io::load_module(*resumed, (dir / "model.safetensors").string());
  auto opt2 = adamw(*resumed);
  OptimizerStateDict loaded;
  loaded.tensors = io::load_safetensors((dir / "optimizer.safetensors").string());
  loaded.step = sd.step;
  opt2->load_state_dict(loaded);
  fs::remove_all(dir);
  EXPECT_EQ(opt2->step_count(), 3);

  train_step(*straight, *opt, 3);
  train_step(*resumed, *opt2, 3);
  EXPECT_EQ(values(*resumed), values(*straight));
}

// A parameter swapped for another tensor (as re-materializing, offloading or resharding will do)
// keeps its state once the name is pointed at the new tensor.
TEST(OptimNamedState, RebindKeepsStateAcrossASwappedTensor) {
  auto run = [](bool swap) {
    models::GPT2 m(small_gpt2(), {.seed = 3});
    auto opt = adamw(m);
    for (int s = 0; s < 2; ++s) train_step(m, *opt, s);
    if (swap) {
      for (auto& [name, slot] : m.named_parameter_slots()) {
        Tensor fresh = slot->clone().detach().set_requires_grad(true);
        *slot = fresh;
        opt->rebind(name, fresh);
      }
    }
    train_step(m, *opt, 2);
    return values(m);
  };
  EXPECT_EQ(run(true), run(false));

  models::GPT2 m(small_gpt2(), {.seed = 3});
  auto opt = adamw(m);
  std::string e;
  try {
    opt->rebind("transformer.wte.weight", zeros({2, 2}));
  } catch (const Error& err) {
    e = err.what();
  }
  EXPECT_NE(e.find("rebind of 'transformer.wte.weight' to another kind of tensor"), std::string::npos) << e;
  EXPECT_THROW(opt->rebind("nope", zeros({2, 2})), Error);
  EXPECT_THROW(opt->step_param(std::string("nope")), Error);
}

// State placed on another device than the parameters (offload will put it on the host): here
// parameters on meta, state on the CPU.
TEST(OptimNamedState, StateGoesToTheChosenDevice) {
  models::GPT2 m(small_gpt2(), {.device = Device::meta()});
  auto opt = adamw(m);
  opt->set_state_device(Device::cpu());
  for (auto& [n, p] : m.named_trainable_parameters()) p.set_grad(zeros(p.shape(), p.dtype(), Device::meta()));
  Allocator& cpu = allocator_for(Device::cpu());
  Allocator& meta = allocator_for(Device::meta());
  const int64_t cpu_before = cpu.stats().category[int(Category::OptimizerState)].current;
  const int64_t meta_before = meta.stats().category[int(Category::OptimizerState)].current;
  opt->step();
  EXPECT_EQ(meta.stats().category[int(Category::OptimizerState)].current, meta_before);
  EXPECT_GE(cpu.stats().category[int(Category::OptimizerState)].current - cpu_before, 2 * m.parameter_bytes());
  EXPECT_EQ(opt->state_bytes(), 2 * m.parameter_bytes());
  for (auto& [k, t] : opt->state_dict().tensors) EXPECT_TRUE(t.device().is_cpu()) << k;
  EXPECT_THROW(opt->set_state_device(std::nullopt), Error);  // after the first update
}

// By default the state follows each parameter's device, and naming it explicitly changes nothing.
TEST(OptimNamedState, ExplicitSameDevicePlacementChangesNothing) {
  auto run = [](bool explicit_cpu) {
    models::GPT2 m(small_gpt2(), {.seed = 2});
    auto opt = adamw(m);
    if (explicit_cpu) opt->set_state_device(Device::cpu());
    for (int s = 0; s < 2; ++s) train_step(m, *opt, s);
    return values(m);
  };
  EXPECT_EQ(run(true), run(false));
}
