// The loss scaler's arithmetic (torch.amp.GradScaler semantics) and the policy table.
#include <gtest/gtest.h>

#include "leantrain/error.h"
#include "leantrain/precision.h"

using namespace lt;

TEST(GradScaler, StartsAt65536AndDoublesAfter2000CleanSteps) {
  GradScaler s;
  EXPECT_EQ(s.scale(), 65536.0);
  for (int i = 0; i < 1999; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 65536.0);  // not yet
  EXPECT_EQ(s.growth_tracker(), 1999);
  s.update(false);
  EXPECT_EQ(s.scale(), 131072.0);
  EXPECT_EQ(s.growth_tracker(), 0);
  for (int i = 0; i < 2000; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 262144.0);
  EXPECT_EQ(s.steps(), 4000);
  EXPECT_EQ(s.skipped(), 0);
}

TEST(GradScaler, OverflowHalvesAndRestartsTheCount) {
  GradScaler s;
  for (int i = 0; i < 1500; ++i) s.update(false);
  s.update(true);
  EXPECT_EQ(s.scale(), 32768.0);
  EXPECT_EQ(s.growth_tracker(), 0);
  EXPECT_EQ(s.steps(), 1501);  // a skipped step is still recorded
  EXPECT_EQ(s.skipped(), 1);
  for (int i = 0; i < 1999; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 32768.0);  // 1500 clean steps before the overflow do not count
  s.update(false);
  EXPECT_EQ(s.scale(), 65536.0);
  s.update(true);
  s.update(true);
  EXPECT_EQ(s.scale(), 16384.0);
}

TEST(GradScaler, NeverGrowsPastTheF32Range) {
  GradScaler s(GradScalerOptions{.init_scale = 2e38, .growth_interval = 1});
  s.update(false);
  EXPECT_EQ(s.scale(), 2e38);
}

TEST(GradScaler, StateRoundTripsThroughJson) {
  GradScaler a;
  for (int i = 0; i < 7; ++i) a.update(i == 3);
  GradScaler b;
  b.load_state_json(a.state_json());
  EXPECT_EQ(b.scale(), a.scale());
  EXPECT_EQ(b.growth_tracker(), a.growth_tracker());
  EXPECT_EQ(b.steps(), a.steps());
  EXPECT_EQ(b.skipped(), a.skipped());
  EXPECT_THROW(b.load_state_json("{\"scale\": -1, \"growth_tracker\": 0}"), Error);
  EXPECT_THROW(b.load_state_json("not json"), Error);
}

TEST(PrecisionPolicy, Table) {
  EXPECT_EQ(precision_policy("32-true").param_dtype, DType::F32);
  EXPECT_FALSE(precision_policy("32-true").compute_dtype);
  auto m16 = precision_policy("16-mixed");
  EXPECT_EQ(m16.param_dtype, DType::F32);
  EXPECT_EQ(*m16.compute_dtype, DType::F16);
  EXPECT_TRUE(m16.loss_scaling);
  auto mbf = precision_policy("bf16-mixed");
  EXPECT_EQ(*mbf.compute_dtype, DType::BF16);
  EXPECT_FALSE(mbf.loss_scaling);
  EXPECT_EQ(precision_policy("16-true").param_dtype, DType::F16);
  EXPECT_EQ(precision_policy("bf16-true").param_dtype, DType::BF16);
  EXPECT_FALSE(precision_policy("bf16-true").compute_dtype);
  EXPECT_THROW(precision_policy("fp16"), Error);
}
