// fsdp's sharded build (dist/fsdp_build.h): each rank of a world creates only what it keeps. Checked
// against the whole build of the same seed, on the CPU, a world of 2 or 3 stood in for by the
// plan's meta communicator (the build moves no data between ranks):
//   - every parameter a rank keeps holds the whole build's values, bit for bit;
//   - every unit parameter (a block's, an untied table's or head's) is kept by exactly its owner,
//     every other parameter and every buffer by all ranks;
//   - a rank allocates less than the whole model, and only what it keeps;
//   - what is not built sharded (LoRA, one rank, other strategies) is built whole.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "dist/data_parallel.h"
#include "dist/fsdp_build.h"
#include "dist/fsdp_units.h"
#include "leantrain/dist.h"
#include "leantrain/memory.h"
#include "train_test_util.h"

namespace lt {
namespace {

struct WorldScope {
  WorldScope(int n, int rank) { dist::set_world(dist::make_meta_communicator(n, rank)); }
  ~WorldScope() { dist::set_world(nullptr); }
};

// Values of every parameter and buffer that has memory, by name.
std::map<std::string, std::vector<float>> values(models::Model& m) {
  std::map<std::string, std::vector<float>> out;
  for (auto& [n, p] : m.named_parameters())
    if (p.storage()) out[n] = p.to_float_vector();
  for (auto& [n, b] : m.named_buffers())
    if (b.storage() && is_floating(b.dtype())) out["buffer " + n] = b.to_float_vector();
  return out;
}

RunConfig untied_llama(const std::filesystem::path& dir) {
  std::ofstream(dir / "untied.json")
      << R"({"model_type": "llama", "hidden_size": 32, "intermediate_size": 88, "num_hidden_layers": 3,
             "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 96, "max_position_embeddings": 64,
             "tie_word_embeddings": false})";
  RunConfig c;
  c.model_config = (dir / "untied.json").string();
  c.data = "synthetic";
  c.seq_len = 16;
  c.batch = 6;
  c.steps = 2;
  c.device = "cpu";
  c.seed = 7;
  return c;
}

// Builds `c` on every rank of a world of `n` and checks each against the whole build.
void check_sharded_build(RunConfig c, int n, const std::string& what) {
  SCOPED_TRACE(what + ", " + std::to_string(n) + " ranks");
  c.strategy = StrategyKind::Fsdp;
  validate(c);
  Allocator& al = allocator_for(Device::cpu());
  const int64_t before = al.stats().allocated_bytes.current;
  std::unique_ptr<Task> whole = make_task(c, Device::cpu());
  const int64_t whole_bytes = al.stats().allocated_bytes.current - before;
  const auto expected = values(*whole->model);
  std::vector<Tensor> params;
  for (auto& [name, p] : whole->model->named_trainable_parameters()) params.push_back(p);
  std::set<std::string> unit_params;
  for (nn::Module* m : dist::fsdp_unit_modules(*whole->model))
    for (auto& [name, p] : m->named_parameters())
      for (auto& [full, q] : whole->model->named_parameters())
        if (q.impl() == p.impl()) unit_params.insert(full);
  ASSERT_FALSE(unit_params.empty());
  std::map<std::string, int> kept_by;
  for (int r = 0; r < n; ++r) {
    WorldScope world(n, r);
    ASSERT_TRUE(dist::builds_sharded(c));
    const int64_t at = al.stats().allocated_bytes.current;
    std::unique_ptr<Task> t = make_task(c, Device::cpu());
    const int64_t bytes = al.stats().allocated_bytes.current - at;
    EXPECT_LT(bytes, whole_bytes) << "rank " << r;
    int64_t kept_bytes = 0;
    for (auto& [name, p] : t->model->named_parameters()) {
      if (!p.storage()) {
        EXPECT_TRUE(unit_params.count(name)) << name << " is outside the units but has no memory on rank " << r;
        continue;
      }
      ++kept_by[name];
      kept_bytes += (p.nbytes() + 511) / 512 * 512;
    }
    for (auto& [name, b] : t->model->named_buffers()) {
      EXPECT_TRUE(b.storage()) << "buffer " << name << " on rank " << r;
      if (b.storage()) kept_bytes += (b.nbytes() + 511) / 512 * 512;
    }
    EXPECT_GE(bytes, kept_bytes) << "rank " << r;
    for (auto& [name, v] : values(*t->model)) {
      auto it = expected.find(name);
      ASSERT_NE(it, expected.end()) << name;
      EXPECT_EQ(v, it->second) << name << " on rank " << r;
    }
  }
  for (auto& [name, p] : whole->model->named_parameters())
    EXPECT_EQ(kept_by[name], unit_params.count(name) ? 1 : n) << name;
}

// Labelled text for the classifiers, written here (the fortunes package need not be installed).
std::string labelled_text(const std::filesystem::path& dir) {
  const std::string path = (dir / "labelled.jsonl").string();
  std::ofstream f(path);
  for (int i = 0; i < 24; ++i)
    f << "{\"text\": \"line " << i << (i % 2 ? " odd words here" : " even words there") << "\", \"label\": " << i % 2
      << "}\n";
  return path;
}

TEST(FsdpBuild, EachRankBuildsItsShareWithTheWholeBuildsValues) {
  test::TempDir tmp;
  check_sharded_build(test::tiny_gpt(tmp.path), 2, "gpt2, tied table");
  check_sharded_build(test::tiny_gpt(tmp.path), 3, "gpt2, tied table");
  RunConfig llama = untied_llama(tmp.path);
  check_sharded_build(llama, 2, "llama, untied table and head");
  check_sharded_build(llama, 3, "llama, untied table and head");
  llama.loss_chunk = 32;  // the chunked loss reads the head's weight: the head is replicated
  check_sharded_build(llama, 2, "llama with --loss-chunk");
  RunConfig bert;  // post-norm encoder layers as the units, a sequence classifier
  std::ofstream(tmp.path / "bert.json")
      << R"({"model_type": "bert", "vocab_size": 256, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
             "intermediate_size": 64, "max_position_embeddings": 32, "hidden_dropout_prob": 0.0, "classifier_dropout": 0.0})";
  bert.model_config = (tmp.path / "bert.json").string();
  bert.data = labelled_text(tmp.path);
  bert.seq_len = 16;
  bert.batch = 4;
  bert.steps = 1;
  bert.device = "cpu";
  check_sharded_build(bert, 2, "bert");
  RunConfig vit;
  vit.model = "vit-tiny";
  vit.data = "synthetic";
  vit.batch = 4;
  vit.steps = 1;
  vit.device = "cpu";
  check_sharded_build(vit, 2, "vit");
}

// The tables' padding rows are zero (transformers' padding_idx) in a deferred build too: the
// zeroing is part of the slot's init (Init::zero_row), not a write after the build.
TEST(FsdpBuild, PaddingRowsAreZeroInEveryBuild) {
  test::TempDir tmp;
  RunConfig c;
  c.model = "roberta-tiny";
  c.data = labelled_text(tmp.path);
  c.seq_len = 16;
  c.batch = 4;
  c.steps = 1;
  c.device = "cpu";
  c.strategy = StrategyKind::Fsdp;
  validate(c);
  for (int n : {1, 2}) {
    std::unique_ptr<WorldScope> world;
    if (n > 1) world = std::make_unique<WorldScope>(n, 0);
    std::unique_ptr<Task> t = make_task(c, Device::cpu());
    int rows = 0;
    for (auto& [name, p] : t->model->named_parameters()) {
      const bool word = name.find("word_embeddings") != std::string::npos;
      if (!word && name.find("position_embeddings") == std::string::npos) continue;
      ASSERT_TRUE(p.storage()) << name;
      const std::vector<float> v = p.to_float_vector();
      const int64_t C = p.size(1), pad = 1;  // RoBERTa's pad_token_id
      for (int64_t j = 0; j < C; ++j) EXPECT_EQ(v[size_t(pad * C + j)], 0.0f) << name;
      EXPECT_NE(v[size_t(2 * C)], 0.0f) << name;  // the next row is drawn
      ++rows;
    }
    EXPECT_EQ(rows, 2) << n;
  }
}

// Only fsdp over 2+ ranks with every parameter trainable at the build is built sharded.
TEST(FsdpBuild, OtherRunsBuildWhole) {
  test::TempDir tmp;
  RunConfig c = untied_llama(tmp.path);
  c.strategy = StrategyKind::Fsdp;
  EXPECT_FALSE(dist::builds_sharded(c));  // one rank
  WorldScope world(2, 1);
  EXPECT_TRUE(dist::builds_sharded(c));
  c.lora_rank = 4;  // the base is frozen after the build
  EXPECT_FALSE(dist::builds_sharded(c));
  c.lora_rank = 0;
  c.offload = OffloadKind::Params;
  EXPECT_FALSE(dist::builds_sharded(c));
  c.offload = OffloadKind::None;
  for (StrategyKind s : {StrategyKind::Ddp, StrategyKind::Zero1, StrategyKind::Zero2}) {
    c.strategy = s;
    EXPECT_FALSE(dist::builds_sharded(c)) << name_of(s);
    std::unique_ptr<Task> t = make_task(c, Device::cpu());
    for (auto& [name, p] : t->model->named_parameters()) EXPECT_TRUE(p.storage()) << name_of(s) << " " << name;
  }
}

}  // namespace
}  // namespace lt
