// RunConfig validation, its checkpoint JSON form, and how many steps a run takes.
#include <gtest/gtest.h>

#include "leantrain/train.h"
#include "train/trainer.h"

using namespace lt;

namespace {
std::string usage_message(const RunConfig& c) {
  try {
    validate(c);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(TrainConfig, DefaultsAreValid) { EXPECT_EQ(usage_message(RunConfig{}), ""); }

TEST(TrainConfig, BatchMustDivideByMicroBatch) {
  RunConfig c;
  c.batch = 10;
  c.micro_batch = 4;
  std::string m = usage_message(c);
  EXPECT_NE(m.find("--batch 10 is not divisible by --micro-batch 4"), std::string::npos) << m;
  EXPECT_NE(m.find("--micro-batch 2"), std::string::npos) << m;  // a divisor is suggested
  c.micro_batch = 5;
  EXPECT_EQ(usage_message(c), "");
}

TEST(TrainConfig, RejectsBadValues) {
  auto bad = [](auto edit, const char* needle) {
    RunConfig c;
    edit(c);
    std::string m = usage_message(c);
    EXPECT_NE(m.find(needle), std::string::npos) << "message: '" << m << "'";
  };
  bad([](RunConfig& c) { c.lr = -1e-3; }, "--lr");  // 0 is allowed: a run that keeps the weights
  bad([](RunConfig& c) { c.save_shard_bytes = 0; }, "--save-shard-size");
  bad([](RunConfig& c) { c.batch = 0; }, "--batch");
  bad([](RunConfig& c) { c.momentum = 1.5; }, "--momentum");
  bad([](RunConfig& c) { c.device = "tpu"; }, "unknown device 'tpu'");
  bad([](RunConfig& c) { c.device = "meta"; }, "--device meta");
  bad([](RunConfig& c) { c.clip = -1; }, "--clip");
  bad([](RunConfig& c) { c.dim = 30, c.heads = 4; }, "--heads");
  bad([](RunConfig& c) { c.eps = 0; }, "--eps 0:");  // the value as typed, not "0.000000"
  bad([](RunConfig& c) { c.dampening = 1; }, "--dampening 1:");
  bad([](RunConfig& c) { c.optimizer = OptimizerKind::Sgd, c.nesterov = true, c.momentum = 0; }, "needs momentum > 0");
  bad([](RunConfig& c) { c.optimizer = OptimizerKind::Sgd, c.nesterov = true, c.dampening = 0.1; }, "and no dampening");
  bad([](RunConfig& c) { c.optimizer = OptimizerKind::AdamW, c.nesterov = true; }, "--nesterov with --optimizer adamw");
  bad([](RunConfig& c) { c.optimizer = OptimizerKind::Lion, c.dampening = 0.5; }, "--dampening with --optimizer lion");
}

TEST(TrainConfig, SgdNesterovAndDampeningAreValid) {
  RunConfig c;
  c.optimizer = OptimizerKind::Sgd;
  c.nesterov = true;
  EXPECT_EQ(usage_message(c), "");
  c.nesterov = false;
  c.dampening = 0.5;
  EXPECT_EQ(usage_message(c), "");
}

TEST(TrainConfig, JsonRoundTrip) {
  RunConfig c;
  c.model = "gpt2-tiny";
  c.batch = 12;
  c.lr = 3.25e-4;
  c.seed = 1234567890123ull;
  c.schedule = ScheduleKind::Constant;
  c.nesterov = true;
  c.dampening = 0.25;
  c.debug_nan_at_step = 7;  // a test knob: never stored
  RunConfig r = config_from_json(config_to_json(c));
  EXPECT_EQ(r.model, "gpt2-tiny");
  EXPECT_EQ(r.batch, 12);
  EXPECT_EQ(r.lr, 3.25e-4);
  EXPECT_EQ(r.seed, 1234567890123ull);
  EXPECT_EQ(r.schedule, ScheduleKind::Constant);
  EXPECT_TRUE(r.nesterov);
  EXPECT_EQ(r.dampening, 0.25);
  EXPECT_EQ(r.debug_nan_at_step, 0);
  EXPECT_THROW(config_from_json("{not json"), Error);
  EXPECT_THROW(config_from_json("{\"batch\": \"many\"}"), Error);
}

TEST(TrainConfig, TotalSteps) {
  RunConfig c;
  EXPECT_EQ(total_steps_for(c, 100), 200);  // the demo's two epochs by default
  c.epochs = 0;
  EXPECT_EQ(total_steps_for(c, 100), 100);  // 0 and 0: one epoch
  c.epochs = 2.5;
  EXPECT_EQ(total_steps_for(c, 100), 250);
  c.steps = 7;
  EXPECT_EQ(total_steps_for(c, 100), 7);
  c.batch = 64;
  c.micro_batch = 16;  // 4 micro-batches a step
  EXPECT_EQ(steps_per_epoch(c, 937), 234);
  EXPECT_EQ(steps_per_epoch(c, 3), 1);
}
