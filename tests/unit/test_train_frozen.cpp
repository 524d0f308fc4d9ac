// The trainer hands the optimizer and the clip norm the trainable parameters only: a parameter
// frozen before the trainer is built keeps its values and gets no grad and no state.
#include <gtest/gtest.h>

#include "train_test_util.h"

using namespace lt;

TEST(TrainFrozen, FrozenParametersAreLeftOutOfTheStep) {
  lt::test::TempDir tmp;
  RunConfig c = lt::test::tiny_gpt(tmp.path);
  c.clip = 1.0;
  validate(c);
  auto task = make_task(c, Device::cpu());
  task->model->set_trainable(R"(transformer\.(wpe|h\.0\.ln_1)\..*)", false);
  const std::vector<uint8_t> wpe = lt::test::bytes_of(task->model->parameter("transformer.wpe.weight"));
  Trainer t(c, *task);
  t.start();
  for (int i = 0; i < 2; ++i) t.step();
  EXPECT_EQ(lt::test::bytes_of(task->model->parameter("transformer.wpe.weight")), wpe);
  EXPECT_FALSE(task->model->parameter("transformer.wpe.weight").grad().defined());
  const OptimizerStateDict sd = t.optimizer().state_dict();
  for (auto& [key, tensor] : sd.tensors) {
    EXPECT_NE(key.rfind("transformer.wpe.", 0), 0u) << key;
    EXPECT_NE(key.rfind("transformer.h.0.ln_1.", 0), 0u) << key;
  }
  EXPECT_TRUE(sd.tensors.count("transformer.h.1.ln_1.weight.exp_avg"));
  EXPECT_EQ(t.optimizer().params().size(), task->model->named_parameters().size() - 3);
}
