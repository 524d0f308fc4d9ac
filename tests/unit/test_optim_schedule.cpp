// Learning-rate schedules at chosen steps (values as Hugging Face's schedulers give them).
#include <gtest/gtest.h>

#include <cmath>

#include "leantrain/error.h"
#include "leantrain/optim.h"

using namespace lt;

TEST(OptimSchedule, Constant) {
  LrSchedule s{LrScheduleKind::Constant, 0.1, 10, 100, 0.0};
  EXPECT_DOUBLE_EQ(s.at(0), 0.1);
  EXPECT_DOUBLE_EQ(s.at(1000), 0.1);
}

TEST(OptimSchedule, WarmupConstant) {
  LrSchedule s{LrScheduleKind::WarmupConstant, 0.1, 4, 0, 0.0};
  EXPECT_DOUBLE_EQ(s.at(0), 0.0);
  EXPECT_DOUBLE_EQ(s.at(1), 0.025);
  EXPECT_DOUBLE_EQ(s.at(3), 0.075);
  EXPECT_DOUBLE_EQ(s.at(4), 0.1);
  EXPECT_DOUBLE_EQ(s.at(50), 0.1);
}

TEST(OptimSchedule, WarmupCosineToMin) {
  LrSchedule s{LrScheduleKind::WarmupCosine, 1.0, 10, 110, 0.1};
  EXPECT_DOUBLE_EQ(s.at(0), 0.0);
  EXPECT_DOUBLE_EQ(s.at(5), 0.5);
  EXPECT_DOUBLE_EQ(s.at(10), 1.0);
  EXPECT_NEAR(s.at(35), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 0.25)), 1e-15);
  EXPECT_NEAR(s.at(60), 0.55, 1e-15);
  EXPECT_NEAR(s.at(110), 0.1, 1e-15);
  EXPECT_NEAR(s.at(500), 0.1, 1e-15);  // held after the end
  // min_lr 0 is HF's get_cosine_schedule_with_warmup.
  LrSchedule h{LrScheduleKind::WarmupCosine, 2.0, 0, 100, 0.0};
  EXPECT_DOUBLE_EQ(h.at(0), 2.0);
  EXPECT_NEAR(h.at(50), 1.0, 1e-15);
}

TEST(OptimSchedule, WarmupLinear) {
  LrSchedule s{LrScheduleKind::WarmupLinear, 1.0, 2, 12, 0.0};
  EXPECT_DOUBLE_EQ(s.at(1), 0.5);
  EXPECT_DOUBLE_EQ(s.at(2), 1.0);
  EXPECT_DOUBLE_EQ(s.at(7), 0.5);
  EXPECT_DOUBLE_EQ(s.at(12), 0.0);
}

TEST(OptimSchedule, ParseAndErrors) {
  EXPECT_EQ(parse_lr_schedule("cosine"), LrScheduleKind::WarmupCosine);
  EXPECT_EQ(parse_lr_schedule("warmup_constant"), LrScheduleKind::WarmupConstant);
  EXPECT_THROW(parse_lr_schedule("exponential"), Error);
  LrSchedule s{LrScheduleKind::WarmupCosine, 1.0, 0, 0, 0.0};
  EXPECT_THROW(s.at(3), Error);  // cosine needs total_steps
}
