// The recipe table drives the command line, the saved run config and the echoed command: a
// config changed in every field survives each of them, and a bad choice is one clear error.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "cli/cli.h"
#include "leantrain/plan.h"
#include "train/recipe_table.h"
#include "unit/error_of.h"

using namespace lt;

namespace {

// A config that differs from the default in every field the table names (values chosen to pass
// validate() where it matters; the table's ranges hold).
RunConfig changed_everywhere() {
  RunConfig c;
  c.model = "gpt2-tiny";
  c.data = "fortunes";
  c.seq_len = 33;
  c.tokenizer = "tok dir/tokenizer.json";  // a space: the echoed command must quote it
  c.prompt_field = "question";
  c.response_field = "answer";
  c.chat_template = "chat ml.jinja";
  c.train_on = TrainOn::All;
  c.packing = Packing::None;
  c.objective = Objective::Dpo;
  c.dpo_loss = DpoLoss::Simpo;
  c.beta = 0.2, c.label_smoothing = 0.1, c.simpo_gamma = 0.7;
  c.chosen_field = "better", c.rejected_field = "worse";
  c.dim = 64, c.depth = 3, c.heads = 4, c.patch = 2, c.mlp_dim = 96;
  c.batch = 12, c.micro_batch = 6, c.loss_chunk = 7, c.steps = 9, c.epochs = 0.25, c.workers = 3;
  c.optimizer = OptimizerKind::Lion;
  c.lr = 3e-4, c.momentum = 0.8, c.weight_decay = 0.01, c.beta1 = 0.85, c.beta2 = 0.95, c.eps = 1e-7;
  c.schedule = ScheduleKind::Constant;
  c.warmup = 2, c.min_lr_ratio = 0.1, c.clip = 1.5, c.seed = 12345678901234567ull;
  c.precision = Precision::TrueBf16;
  c.state_dtype = StateDtype::Bf16;
  c.checkpoint = parse_checkpoint_flag("transformer\\.h\\.[0-1]");
  c.lean_saves = false;
  c.offload_activations = true;
  c.gemm_workspace = 4 << 20;
  c.attention_kernel = AttentionKernel::Auto;
  c.quantize = QuantizeKind::Nf4;
  c.lora_rank = 4, c.lora_alpha = 16, c.lora_dropout = 0.05, c.lora_targets = "c_attn|c_proj", c.lora_init = "adapter";
  c.devices = 2;
  c.strategy = StrategyKind::Fsdp;
  c.reshard_after_forward = false;
  c.fsdp_gather = FsdpGather::F32;
  c.bucket_mb = 50, c.buckets_in_flight = 4, c.dist_timeout = 120.5;
  c.save_sharded = true;
  c.eval_every = 5, c.eval_batches = 2;
  c.save = "runs/x", c.save_shard_bytes = 1000000;
  c.device = "cpu";
  c.metrics = "m.jsonl";
  return c;
}

// The words of a command line as a POSIX shell splits them (plain words and '...' quoting, which
// is all command_line() writes).
std::vector<std::string> shell_words(const std::string& s) {
  std::vector<std::string> out;
  std::string w;
  bool in_word = false;
  for (size_t i = 0; i < s.size(); ++i) {
    char ch = s[i];
    if (ch == '\'') {
      in_word = true;
      size_t j = s.find('\'', i + 1);
      w += s.substr(i + 1, j - i - 1);
      i = j;
    } else if (ch == '\\' && i + 1 < s.size()) {
      in_word = true;
      w += s[++i];
    } else if (ch == ' ') {
      if (in_word) out.push_back(w), w.clear(), in_word = false;
    } else {
      in_word = true;
      w += ch;
    }
  }
  if (in_word) out.push_back(w);
  return out;
}

RunConfig parse_train(const std::vector<std::string>& words) {
  RunConfig cfg;
  CLI::App app("t", "leantrain");
  auto* train = app.add_subcommand("train");
  cli::add_train_flags(*train, cfg);
  std::vector<const char*> argv;
  for (const std::string& w : words) argv.push_back(w.c_str());
  app.parse(int(argv.size()), const_cast<char**>(argv.data()));
  return cfg;
}

}  // namespace

TEST(RecipeTable, FlagsAndKeysAreUnique) {
  std::set<std::string> flags, keys;
  for (const RecipeField& f : recipe_fields()) {
    EXPECT_TRUE(flags.insert(f.flag).second) << f.flag;
    EXPECT_TRUE(keys.insert(f.key).second) << f.key;
    EXPECT_EQ(recipe_field(f.flag), &f);
    EXPECT_EQ(recipe_field(f.key), &f);
    if (f.kind == FieldKind::Int) EXPECT_NE(f.irange, nullptr) << f.flag << " has no range";
  }
}

TEST(RecipeTable, EveryFieldDiffersInTheTestConfig) {
  // Guards the tests below: a field left at its default would round-trip trivially.
  const RunConfig c = changed_everywhere();
  for (const RecipeField& f : recipe_fields()) {
    const std::string k = f.key;
    if (k == "model_config" || k == "resume" || k == "offload_dir" || k == "host_memory_limit" || k == "offload" ||
        k == "master_weights" || k == "stochastic_rounding" || k == "fused_step" || k == "keep_casts" || k == "nesterov" ||
        k == "dampening" || k == "memory_history" || k == "memory_snapshot" || k == "memory_report" || k == "log_every" || k == "stop_at" ||
        k == "debug_nan_at_step")
      continue;  // each excludes another changed field (--config replaces --model, ...) or is a side output
    EXPECT_FALSE(field_is_default(f, c)) << f.flag;
  }
}

TEST(RecipeTable, TheEchoedCommandParsesBackToTheSameConfig) {
  const RunConfig c = changed_everywhere();
  const std::string cmd = command_line(c);
  std::vector<std::string> words = shell_words(cmd);
  ASSERT_GE(words.size(), 2u);
  ASSERT_EQ(words[0], "leantrain");
  RunConfig back = parse_train(words);
  for (const RecipeField& f : recipe_fields()) {
    if (f.echo == Echo::Never) continue;
    if (f.echo_if && !f.echo_if(c)) continue;
    EXPECT_EQ(field_text(f, back), field_text(f, c)) << f.flag << " in: " << cmd;
  }
}

TEST(RecipeTable, TheSavedConfigKeepsEverySavedField) {
  const RunConfig c = changed_everywhere();
  const RunConfig back = config_from_json(config_to_json(c));
  for (const RecipeField& f : recipe_fields())
    if (f.saved) EXPECT_EQ(field_text(f, back), field_text(f, c)) << f.key;
  EXPECT_EQ(back.checkpoint.mode, nn::CheckpointSpec::Mode::Regex);
}

// A checkpoint saved before --packing and --train-on existed: it concatenated documents and
// masked a pair's prompt, which is what the missing keys read as.
TEST(RecipeTable, FieldsAddedLaterReadAsWhatOlderRunsDid) {
  RunConfig c;
  c.packing = Packing::None;
  c.train_on = TrainOn::All;
  nlohmann::json j = nlohmann::json::parse(config_to_json(c));
  j.erase("packing");
  j.erase("train_on");
  const RunConfig back = config_from_json(j.dump());
  EXPECT_EQ(back.packing, Packing::Concat);
  EXPECT_EQ(back.train_on, TrainOn::Assistant);
  j.erase("seed");  // a field that was always there is still required
  EXPECT_NE(test::error_of([&] { config_from_json(j.dump()); }).find("\"seed\" is missing"), std::string::npos);
}

TEST(RecipeTable, AnUnknownChoiceInASavedConfigIsDamage) {
  std::string json = config_to_json(RunConfig{});
  const std::string from = "\"offload\": \"none\"", to = "\"offload\": \"gpu\"";
  ASSERT_NE(json.find(from), std::string::npos) << json;
  json.replace(json.find(from), from.size(), to);
  const std::string e = test::error_of([&] { config_from_json(json); });
  EXPECT_NE(e.find("run config is damaged"), std::string::npos) << e;
  EXPECT_NE(e.find("none, optimizer or params"), std::string::npos) << e;
}

TEST(RecipeTable, EveryChoiceTakesItsNamesAndRefusesOthers) {
  int choices = 0;
  for (const RecipeField& f : recipe_fields()) {
    if (f.kind != FieldKind::Choice) continue;
    ++choices;
    const ChoiceMember& m = std::get<ChoiceMember>(f.member);
    RunConfig c;
    std::string list = m.list();
    // Each listed name sets the field and reads back as itself.
    for (size_t at = 0; at <= list.size();) {
      size_t end = list.find_first_of(",", at);
      const size_t or_at = list.find(" or ", at);
      if (or_at != std::string::npos && (end == std::string::npos || or_at < end)) end = or_at;
      const std::string name = list.substr(at, end == std::string::npos ? std::string::npos : end - at);
      set_choice(f, c, name);
      EXPECT_EQ(m.get(c), name) << f.flag;
      if (end == std::string::npos) break;
      at = list.find_first_not_of(" ,", end == or_at ? end + 4 : end + 1);
    }
    const std::string e = test::error_of([&] { set_choice(f, c, "nonsense"); });
    EXPECT_EQ(e, std::string(f.flag) + " nonsense: the choices are " + list + " (pass one of them)") << f.flag;
  }
  EXPECT_EQ(choices, 14);
}

TEST(RecipeTable, TheCommandLineRefusesAnUnknownChoice) {
  RunConfig cfg;
  CLI::App app("t", "leantrain");
  auto* train = app.add_subcommand("train");
  cli::add_train_flags(*train, cfg);
  const char* argv[] = {"leantrain", "train", "--offload", "gpu"};
  const std::string e = test::error_of([&] { app.parse(4, const_cast<char**>(argv)); });
  EXPECT_NE(e.find("--offload gpu"), std::string::npos) << e;
}
