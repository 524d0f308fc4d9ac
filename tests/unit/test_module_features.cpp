// Module features that later techniques build on: trainable flags (set_trainable), registered
// buffers (saved and loaded with the module, never trained) and replace_module.
#include <gtest/gtest.h>

#include <filesystem>
#include <unistd.h>

#include "leantrain/autograd.h"
#include "leantrain/checkpoint.h"
#include "leantrain/error.h"
#include "leantrain/models.h"
#include "leantrain/optim.h"
#include "leantrain/safetensors.h"
#include "small_models.h"
#include "unit/error_of.h"

using namespace lt;
using lt::test::small_gpt2;
using lt::test::small_vit;
namespace fs = std::filesystem;

namespace {

Tensor ids() {
  std::vector<int64_t> v(2 * 8);
  for (size_t i = 0; i < v.size(); ++i) v[i] = int64_t((i * 5 + 1) % 64);
  return from_ints(v, {2, 8});
}

using lt::test::error_of;

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::vector<std::string> names_of(const std::vector<std::pair<std::string, Tensor>>& v) {
  std::vector<std::string> out;
  for (auto& [n, t] : v) out.push_back(n);
  return out;
}

}  // namespace

// ---------------------------------------------------------------- trainable flags

TEST(ModuleTrainable, FrozenParametersGetNoGradAndNoOptimizerState) {
  models::GPT2 m(small_gpt2(), {.seed = 1});
  const size_t all = m.named_parameters().size();
  EXPECT_EQ(m.set_trainable(R"(transformer\.wpe\.weight|transformer\.h\.0\..*)", false), 1 + 12);
  auto trainable = m.named_trainable_parameters();
  EXPECT_EQ(trainable.size(), all - 13);
  EXPECT_EQ(m.named_parameters().size(), all);  // still parameters, still saved
  for (auto& n : names_of(trainable)) EXPECT_FALSE(n == "transformer.wpe.weight" || n.rfind("transformer.h.0.", 0) == 0) << n;

  auto opt = make_optimizer(OptimizerConfig{}, decay_groups(trainable));
  Tensor x = ids();
  m.loss(x, x).backward();
  EXPECT_FALSE(m.parameter("transformer.wpe.weight").grad().defined());
  EXPECT_FALSE(m.parameter("transformer.h.0.mlp.c_fc.weight").grad().defined());
  EXPECT_TRUE(m.parameter("transformer.h.1.mlp.c_fc.weight").grad().defined());
  const std::vector<float> frozen = m.parameter("transformer.wpe.weight").to_float_vector();
  opt->step();
  EXPECT_EQ(m.parameter("transformer.wpe.weight").to_float_vector(), frozen);
  const OptimizerStateDict sd = opt->state_dict();
  EXPECT_FALSE(sd.tensors.count("transformer.wpe.weight.exp_avg"));
  EXPECT_TRUE(sd.tensors.count("transformer.h.1.mlp.c_fc.weight.exp_avg"));
  // The clip norm sees only trainable gradients (frozen ones have none).
  EXPECT_GT(clip_grad_norm(m.trainable_parameters(), 0).norm, 0);

  // Unfreezing brings them back; freezing drops an existing grad.
  EXPECT_EQ(m.set_trainable("transformer.wpe.weight", true), 1);
  EXPECT_TRUE(m.parameter("transformer.wpe.weight").requires_grad());
  ASSERT_TRUE(m.parameter("transformer.h.1.mlp.c_fc.weight").grad().defined());
  m.set_trainable("transformer.h.1.mlp.c_fc.weight", false);
  EXPECT_FALSE(m.parameter("transformer.h.1.mlp.c_fc.weight").grad().defined());
}

// A checkpointed block whose parameters are all frozen: its recomputation still sends gradients
// to the input (the trainable embeddings), and none to the frozen weights.
TEST(ModuleTrainable, FrozenBlockUnderActivationCheckpointing) {
  auto grads = [](bool checkpointed) {
    models::GPT2 m(small_gpt2(), {.seed = 6});
    m.set_trainable(R"(transformer\.h\.0\..*)", false);
    if (checkpointed) nn::apply_checkpointing(m, "blocks");
    Tensor x = ids();
    m.loss(x, x).backward();
    EXPECT_FALSE(m.parameter("transformer.h.0.attn.c_attn.weight").grad().defined());
    return m.parameter("transformer.wpe.weight").grad().to_float_vector();
  };
  EXPECT_EQ(grads(true), grads(false));
}

TEST(ModuleTrainable, BadPatternsAreClearErrors) {
  models::GPT2 m(small_gpt2(), {.device = Device::meta()});
  std::string e = error_of([&] { m.set_trainable("no_such_param", false); });
  EXPECT_TRUE(has(e, "no parameter matches 'no_such_param'")) << e;
  e = error_of([&] { m.set_trainable("transformer.h.0", false); });  // a module path, not a whole name
  EXPECT_TRUE(has(e, "no parameter matches")) << e;
  e = error_of([&] { m.set_trainable("(", false); });
  EXPECT_TRUE(has(e, "invalid regex '('")) << e;
}

// ---------------------------------------------------------------- buffers

namespace {
struct WithBuffer : nn::UnaryModule {
  Tensor *w, *running;
  explicit WithBuffer(const nn::InitOptions& o) {
    nn::ParamFactory pf(o);
    w = &register_parameter("weight", pf.make({3}, nn::Init::normal(1.0)));
    running = &register_buffer("running_mean", pf.make_buffer({3}, nn::Init::zeros()));
  }
  const char* type_name() const override { return "WithBuffer"; }
  Tensor forward(const Tensor& x) override { return add(mul(x, *w), *running); }
};
struct Outer : nn::Module {
  std::shared_ptr<WithBuffer> inner;
  explicit Outer(const nn::InitOptions& o) { inner = register_module("inner", std::make_shared<WithBuffer>(o)); }
};
}  // namespace

TEST(ModuleBuffers, SavedAndLoadedWithTheModuleNeverTrained) {
  Outer a({.seed = 1});
  EXPECT_EQ(names_of(a.named_buffers()), std::vector<std::string>{"inner.running_mean"});
  EXPECT_EQ(names_of(a.named_parameters()), std::vector<std::string>{"inner.weight"});
  EXPECT_FALSE(a.inner->running->requires_grad());
  EXPECT_EQ(a.named_trainable_parameters().size(), 1u);
  {
    NoGradGuard ng;
    copy_(*a.inner->running, from_vector(std::vector<float>{1, 2, 3}, {3}));
  }
  const fs::path file = fs::temp_directory_path() / ("lt-buffers-" + std::to_string(::getpid()) + ".safetensors");
  io::save_module(a, file.string());
  EXPECT_EQ(io::load_safetensors(file.string()).count("inner.running_mean"), 1u);
  Outer b({.seed = 2});
  io::load_module(b, file.string());
  EXPECT_EQ(b.inner->running->to_float_vector(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(b.inner->w->to_float_vector(), a.inner->w->to_float_vector());
  // A file without the buffer is incomplete, as one without a parameter is.
  io::save_safetensors(file.string(), a.named_parameters(), {});
  std::string e = error_of([&] { io::load_module(b, file.string()); });
  EXPECT_TRUE(has(e, "'inner.running_mean' is missing")) << e;
  fs::remove(file);
  // A buffer's name is taken like a parameter's.
  struct Clash : nn::Module {
    Clash() {
      register_buffer("x", zeros({1}));
      register_parameter("x", zeros({1}));
    }
  };
  EXPECT_TRUE(has(error_of([] { Clash c; }), "duplicate name 'x'"));
}

// ---------------------------------------------------------------- replace_module

namespace {
// Wraps a module (as LoRA or a quantized linear will): base(x) * factor.
struct Scaled : nn::UnaryModule {
  nn::Child<nn::UnaryModule> base;
  double factor;
  Scaled(std::shared_ptr<nn::UnaryModule> b, double f) : factor(f) { base = register_child("base", std::move(b)); }
  const char* type_name() const override { return "Scaled"; }
  Tensor forward(const Tensor& x) override { return scale((*base)(x), factor); }
};
}  // namespace

TEST(ModuleReplace, TheOwnerCallsTheReplacementAndTheNamesFollow) {
  models::GPT2 m(small_gpt2(), {.seed = 4});
  Tensor x = ids();
  NoGradGuard ng;
  const std::vector<float> before = m.forward(x).to_float_vector();
  const std::string path = "transformer.h.0.mlp.c_fc";
  Tensor w = m.parameter(path + ".weight");
  // Wrap the old Linear: the wrapper owns it from then on.
  std::shared_ptr<nn::Module> owned;
  for (auto& [n, c] : m.find_module("transformer.h.0.mlp")->children())
    if (n == "c_fc") owned = c;
  ASSERT_TRUE(owned);
  m.replace_module(path, std::make_shared<Scaled>(std::dynamic_pointer_cast<nn::UnaryModule>(owned), 1.0));
  EXPECT_EQ(m.forward(x).to_float_vector(), before);  // factor 1: the same network
  auto names = names_of(m.named_parameters());
  EXPECT_NE(std::find(names.begin(), names.end(), path + ".base.weight"), names.end());
  EXPECT_EQ(std::find(names.begin(), names.end(), path + ".weight"), names.end());
  EXPECT_TRUE(m.parameter(path + ".base.weight").same(w));
  EXPECT_STREQ(m.find_module(path)->type_name(), "Scaled");
  EXPECT_EQ(m.find_module(path + ".base"), owned.get());

  m.replace_module(path, std::make_shared<Scaled>(std::dynamic_pointer_cast<nn::UnaryModule>(owned), 0.0));
  const std::vector<float> zeroed = m.forward(x).to_float_vector();
  EXPECT_NE(zeroed, before);  // the MLP now calls the replacement
  // Zeroing c_fc's output by hand gives the same network: gelu(0) = 0.
  auto plain = std::make_shared<models::GPT2>(small_gpt2(), nn::InitOptions{.seed = 4});
  fill_(plain->parameter(path + ".weight"), 0.0);
  fill_(plain->parameter(path + ".bias"), 0.0);
  EXPECT_EQ(plain->forward(x).to_float_vector(), zeroed);
}

TEST(ModuleReplace, TakesTheTrainingModeAndRefusesWhatTheOwnerWouldNotCall) {
  models::GPT2 m(small_gpt2(), {.device = Device::meta()});
  m.eval();
  nn::ParamFactory pf({.device = Device::meta()});
  auto lin = std::make_shared<nn::Linear>(pf, 32, 128, nn::LinearOptions{.layout = nn::WeightLayout::InOut});
  pf.materialize();
  m.replace_module("transformer.h.1.mlp.c_fc", lin);
  EXPECT_FALSE(lin->is_training());
  EXPECT_EQ(m.find_module("transformer.h.1.mlp.c_fc"), lin.get());

  std::string e = error_of([&] { m.replace_module("transformer.h.0.attn", lin); });
  EXPECT_TRUE(has(e, "the replacement for 'transformer.h.0.attn' is a Conv1D")) << e;
  e = error_of([&] { m.replace_module("transformer.wte", lin); });
  EXPECT_TRUE(has(e, "'transformer.wte' (a Embedding) cannot be replaced")) << e;
  e = error_of([&] { m.replace_module("transformer.h.7.mlp", lin); });
  EXPECT_TRUE(has(e, "no module at 'transformer.h.7.mlp'")) << e;
  e = error_of([&] { m.replace_module("transformer.h.0.mlp", nullptr); });
  EXPECT_TRUE(has(e, "the replacement is null")) << e;

  // A list entry may be replaced; one the model cannot call as a block fails at forward.
  m.replace_module("transformer.h.1", lin);
  e = error_of([&] { m.forward(ids().to(Device::meta())); });
  EXPECT_TRUE(has(e, "module list entry '1' is a Conv1D")) << e;

  // ViT's classifier is called through the model's own pointer: refused, not silently ignored.
  models::ViT v(models::ViTConfig::preset("vit-tiny"), {.device = Device::meta()});
  e = error_of([&] { v.replace_module("heads.head", lin); });
  EXPECT_TRUE(has(e, "cannot be replaced")) << e;
}
