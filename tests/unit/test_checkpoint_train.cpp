// --checkpoint in a training run: the same loss curve, bit for bit, in every mode, with
// gradient accumulation and with the optimizer step fused into backward; a lower activation
// peak; bad values are usage errors; the setting survives in the saved run config.
#include <gtest/gtest.h>

#include "train/recipe_table.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "leantrain/train.h"
#include "train_test_util.h"

using namespace lt;
using lt::test::TempDir;
namespace fs = std::filesystem;

namespace {

RunConfig tiny_gpt(const fs::path& dir) {
  RunConfig c = lt::test::tiny_gpt(dir);
  c.depth = 4;
  c.seq_len = 32;
  c.steps = 3;
  c.warmup = RunConfig{}.warmup;
  c.schedule = RunConfig{}.schedule;
  return c;
}


int64_t activation_peak(const RunResult& r) { return r.memory.category[size_t(Category::Activation)].peak; }

TEST(CheckpointTrain, SameLossesInEveryModeWithAccumulationAndFusedStep) {
  TempDir tmp;
  RunConfig base = tiny_gpt(tmp.path);
  for (bool fused : {false, true}) {
    RunConfig c = base;
    if (fused) c.fused_step = true;
    else c.micro_batch = 4;
    const RunResult ref = train(c);
    for (const char* spec : {"blocks", "every:2", "selective", "transformer\\.h\\.[13]"}) {
      c.checkpoint = parse_checkpoint_flag(spec);
      const RunResult r = train(c);
      EXPECT_EQ(r.losses, ref.losses) << spec << (fused ? " fused step" : " micro-batch 4");
      if (std::string(spec) != "selective")
        EXPECT_LT(activation_peak(r), activation_peak(ref)) << spec;
    }
  }
}

TEST(CheckpointTrain, BadValuesAreUsageErrors) {
  TempDir tmp;
  RunConfig c = tiny_gpt(tmp.path);
  for (const char* bad : {"every:0", "transformer.h.[", "auto"}) {
    EXPECT_THROW(parse_checkpoint_flag(bad), UsageError) << bad;
  }
  c.checkpoint = parse_checkpoint_flag("encoder\\.layers\\..*");  // a ViT path on a GPT: valid, but matches nothing
  validate(c);
  try {
    train(c);
    FAIL() << "expected a usage error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("selects no module"), std::string::npos) << e.what();
  }
}

TEST(CheckpointTrain, StoredInTheRunConfig) {
  RunConfig c;
  c.checkpoint = parse_checkpoint_flag("every:3");
  EXPECT_EQ(config_from_json(config_to_json(c)).checkpoint, c.checkpoint);
  EXPECT_EQ(c.checkpoint.mode, nn::CheckpointSpec::Mode::Every);
  EXPECT_EQ(c.checkpoint.every, 3);
  EXPECT_EQ(RunConfig().checkpoint.text, "none");
}

}  // namespace
