// The loop as a library: exact resume, gradient accumulation, NaN errors, memory categories.
// Runs a tiny GPT on a generated text file, so it needs no installed data set.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "leantrain/train.h"
#include "train_test_util.h"

using namespace lt;
using lt::test::TempDir;
namespace fs = std::filesystem;

namespace {

RunConfig tiny_gpt(const fs::path& dir) {
  RunConfig c = lt::test::tiny_gpt(dir);
  c.steps = 6;
  c.warmup = 2;
  c.schedule = RunConfig{}.schedule;
  return c;
}

}  // namespace

TEST(TrainRun, ResumeContinuesTheSameLossCurve) {
  TempDir tmp;
  RunConfig c = tiny_gpt(tmp.path);
  c.micro_batch = 4;
  RunResult straight = train(c);
  ASSERT_EQ(straight.losses.size(), 6u);

  RunConfig first = c;
  first.stop_at = 3;
  first.save = (tmp.path / "ck").string();
  RunResult a = train(first);
  RunConfig second = c;
  second.resume = first.save;
  RunResult b = train(second);
  std::vector<double> joined = a.losses;
  joined.insert(joined.end(), b.losses.begin(), b.losses.end());
  EXPECT_EQ(joined, straight.losses);  // bit for bit
  EXPECT_EQ(b.steps, 6);
  EXPECT_TRUE(fs::exists(tmp.path / "ck" / "model.safetensors"));
  EXPECT_FALSE(fs::exists(tmp.path / "ck.tmp"));
}

TEST(TrainRun, AccumulationMatchesOneBigBatch) {
  TempDir tmp;
  RunConfig c = tiny_gpt(tmp.path);
  c.steps = 3;
  RunResult whole = train(c);
  c.micro_batch = 2;  // 4 micro-batches of 2
  RunResult split = train(c);
  ASSERT_EQ(whole.losses.size(), split.losses.size());
  for (size_t i = 0; i < whole.losses.size(); ++i) EXPECT_NEAR(whole.losses[i], split.losses[i], 1e-4) << i;
  // Smaller micro-batches keep fewer activations alive.
  EXPECT_LT(split.memory.category[int(Category::Activation)].peak, whole.memory.category[int(Category::Activation)].peak);
}

TEST(TrainRun, NanLossNamesTheStepAndKeepsTheCheckpoint) {
  TempDir tmp;
  RunConfig c = tiny_gpt(tmp.path);
  c.eval_every = 2;
  c.save = (tmp.path / "ck").string();
  c.debug_nan_at_step = 3;
  try {
    train(c);
    FAIL() << "no error";
  } catch (const NumericError& e) {
    EXPECT_NE(std::string(e.what()).find("NaN at step 3"), std::string::npos) << e.what();
    EXPECT_NE(e.fix().find("--lr"), std::string::npos);
  }
  std::ifstream f(fs::path(c.save) / "trainer_state.json");
  nlohmann::json state = nlohmann::json::parse(f);
  EXPECT_EQ(state["step"], 2);  // the save before the NaN, intact
}

TEST(TrainRun, MemoryIsOwnedByCategories) {
  TempDir tmp;
  RunConfig c = tiny_gpt(tmp.path);
  c.steps = 2;
  RunResult r = train(c);
  const MemoryStats& m = r.memory;
  int64_t sum = 0;
  for (const Stat& s : m.category) sum += s.current;
  EXPECT_EQ(sum, m.allocated_bytes.current);  // categories add up to allocated
  EXPECT_GT(m.category[int(Category::Parameter)].current, 0);
  EXPECT_GT(m.category[int(Category::OptimizerState)].current, 0);
  EXPECT_GT(m.category[int(Category::Gradient)].peak, 0);
  EXPECT_GT(m.category[int(Category::Activation)].peak, 0);
  EXPECT_GT(m.category[int(Category::Input)].peak, 0);
  EXPECT_EQ(m.category[int(Category::Gradient)].current, 0);  // freed after each step
  // AdamW keeps two tensors per parameter.
  EXPECT_EQ(m.category[int(Category::OptimizerState)].current, 2 * m.category[int(Category::Parameter)].current);
}
