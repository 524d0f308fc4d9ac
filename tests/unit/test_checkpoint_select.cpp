// Which modules each --checkpoint value selects, and the one-line errors for bad values.
#include <gtest/gtest.h>

#include "checkpoint_helpers.h"
#include "leantrain/error.h"

using namespace lt;
using namespace ckpt_test;

namespace {

using Paths = std::vector<std::string>;

models::GPT2 gpt() { return models::GPT2(gpt2_tiny_dropout(), {.device = Device::meta()}); }

TEST(CheckpointSelect, Modes) {
  models::GPT2 m = gpt();
  EXPECT_EQ(nn::select_checkpoint_modules(m, "none"), Paths{});
  EXPECT_EQ(nn::select_checkpoint_modules(m, ""), Paths{});
  EXPECT_EQ(nn::select_checkpoint_modules(m, "blocks"),
            (Paths{"transformer.h.0", "transformer.h.1", "transformer.h.2", "transformer.h.3"}));
  EXPECT_EQ(nn::select_checkpoint_modules(m, "every:1"), nn::select_checkpoint_modules(m, "blocks"));
  EXPECT_EQ(nn::select_checkpoint_modules(m, "every:2"), (Paths{"transformer.h.0", "transformer.h.2"}));
  EXPECT_EQ(nn::select_checkpoint_modules(m, "every:9"), (Paths{"transformer.h.0"}));
  EXPECT_EQ(nn::select_checkpoint_modules(m, "transformer\\.h\\.[0-9]+"), nn::select_checkpoint_modules(m, "blocks"));
  EXPECT_EQ(nn::select_checkpoint_modules(m, "transformer\\.h\\.(1|3)\\.mlp"),
            (Paths{"transformer.h.1.mlp", "transformer.h.3.mlp"}));
  // Outermost only: the blocks cover everything inside them.
  EXPECT_EQ(nn::select_checkpoint_modules(m, "transformer\\.h\\.0.*"), (Paths{"transformer.h.0"}));
  // selective wraps the blocks (keeping their matmul results: test_checkpoint_memory.cpp).
  EXPECT_EQ(nn::select_checkpoint_modules(m, "selective"), nn::select_checkpoint_modules(m, "blocks"));
  // GELU can still be chosen by path.
  EXPECT_EQ(nn::select_checkpoint_modules(m, ".*\\.mlp\\.act").size(), 4u);
}

TEST(CheckpointSelect, VitPaths) {
  models::ViT m(vit_tiny_dropout(), {.device = Device::meta()});
  EXPECT_EQ(nn::select_checkpoint_modules(m, "encoder\\.layers\\.encoder_layer_(0|1|2)"),
            (Paths{"encoder.layers.encoder_layer_0", "encoder.layers.encoder_layer_1", "encoder.layers.encoder_layer_2"}));
  EXPECT_EQ(nn::select_checkpoint_modules(m, "every:3"),
            (Paths{"encoder.layers.encoder_layer_0", "encoder.layers.encoder_layer_3"}));
  EXPECT_EQ(nn::select_checkpoint_modules(m, "selective"), nn::select_checkpoint_modules(m, "blocks"));
}

// The error's message, or "" when none was thrown.
std::string error_of(const std::string& spec) {
  models::GPT2 m = gpt();
  try {
    nn::apply_checkpointing(m, spec);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(CheckpointSelect, Errors) {
  auto has = [](const std::string& msg, const std::string& part) {
    return msg.find(part) != std::string::npos;
  };
  std::string e = error_of("transformer\\.layers\\.[0-9]+");
  EXPECT_TRUE(has(e, "selects no module") && has(e, "transformer.wte")) << e;
  e = error_of("transformer.h.[0-9");
  EXPECT_TRUE(has(e, "not a valid regular expression")) << e;
  for (const char* bad : {"every:0", "every:", "every:x", "every:-2", "every:2x"}) {
    e = error_of(bad);
    EXPECT_TRUE(has(e, "every:K needs a whole number")) << bad << ": " << e;
  }
  e = error_of("transformer\\.h");  // the ModuleList: no forward of its own
  EXPECT_TRUE(has(e, "ModuleList") && has(e, "not one call that can be recomputed")) << e;
  e = error_of("auto");
  EXPECT_TRUE(has(e, "planner")) << e;
  // Syntax is checked without a model (RunConfig validation uses this).
  EXPECT_THROW(nn::parse_checkpoint_spec("every:0"), Error);
  EXPECT_EQ(nn::parse_checkpoint_spec("every:4").every, 4);
  EXPECT_EQ(error_of("blocks"), "");
}

TEST(CheckpointSelect, NoBlocksToSelect) {
  nn::ParamFactory pf({.device = Device::meta()});
  nn::Linear lin(pf, 4, 4);
  pf.materialize();
  for (const char* spec : {"blocks", "every:2", "selective"}) {
    std::string msg;
    try {
      nn::apply_checkpointing(lin, spec);
    } catch (const Error& err) {
      msg = err.what();
    }
    EXPECT_NE(msg.find("this Linear has no transformer blocks"), std::string::npos) << spec << ": " << msg;
  }
}

}  // namespace
