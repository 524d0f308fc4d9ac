// The step's extension seams: a hook sees the loss it scales, can veto the optimizer step, and is
// told whether the step applied; its state travels through checkpoints.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "train/checkpoint.h"
#include "train/trainer.h"

using namespace lt;
namespace fs = std::filesystem;

namespace {

struct CountingHook : StepHook {
  int scaled = 0, started = 0, applied = 0, vetoed = 0;
  bool veto = false;
  std::string saved = "{\"n\": 0}";
  const char* name() const override { return "counting"; }
  void on_start(Trainer&) override { ++started; }
  Tensor scale_loss(const Tensor& loss) override {
    ++scaled;
    return loss;
  }
  bool after_backward(Trainer&) override { return !veto; }
  void after_step(Trainer&, bool ok) override { ok ? ++applied : ++vetoed; }
  std::string state() const override { return saved; }
  void load_state(const std::string& s) override { saved = "loaded " + s; }
};

RunConfig tiny(const fs::path& dir) {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "hooks see every step of the loop\n";
  std::ofstream(dir / "t.txt") << text;
  RunConfig c;
  c.model = "gpt2-tiny";
  c.dim = 16;
  c.depth = 1;
  c.heads = 2;
  c.data = (dir / "t.txt").string();
  c.seq_len = 8;
  c.batch = 4;
  c.micro_batch = 2;
  c.steps = 4;
  c.device = "cpu";
  return c;
}

}  // namespace

TEST(TrainHooks, SeamsAreCalledAndCanSkipTheStep) {
  fs::path dir = fs::temp_directory_path() / ("lt-hooks-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  RunConfig c = tiny(dir);
  auto task = make_task(c, Device::cpu());
  Trainer t(c, *task);
  auto hook = std::make_unique<CountingHook>();
  CountingHook* h = hook.get();
  t.add_hook(std::move(hook));
  t.start();
  EXPECT_EQ(h->started, 1);

  Tensor w = t.model().named_parameters().front().second;
  std::vector<float> before = w.to_float_vector();
  h->veto = true;
  StepOutcome o = t.step();
  EXPECT_FALSE(o.applied);
  EXPECT_EQ(w.to_float_vector(), before);  // vetoed: no update
  EXPECT_EQ(h->scaled, 2);                 // once per micro-batch
  h->veto = false;
  o = t.step();
  EXPECT_TRUE(o.applied);
  EXPECT_NE(w.to_float_vector(), before);
  EXPECT_EQ(h->applied, 1);
  EXPECT_EQ(h->vetoed, 1);
  EXPECT_EQ(t.steps_done(), 2);

  // Hook state is saved with the checkpoint and handed back on load.
  save_checkpoint((dir / "ck").string(), t);
  Trainer t2(c, *task);
  auto hook2 = std::make_unique<CountingHook>();
  CountingHook* h2 = hook2.get();
  t2.add_hook(std::move(hook2));
  load_checkpoint((dir / "ck").string(), t2);
  EXPECT_EQ(h2->saved, "loaded {\"n\": 0}");
  EXPECT_EQ(t2.steps_done(), 2);
  fs::remove_all(dir);
}
