// --objective dpo (train/dpo.h, data.h's PairDataset): the loss against hand-computed f64
// values, its gradient by finite differences, the pairs' rows, the reference with the adapters
// off against a model that has none, the precomputed reference against a frozen copy of the
// starting weights, the plan's exactness, and the data's refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "gradcheck.h"
#include "leantrain/autograd.h"
#include "leantrain/models.h"
#include "leantrain/nn_lora.h"
#include "leantrain/plan.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "train/dpo.h"
#include "train/lora_setup.h"
#include "train/recipe_table.h"
#include "train_test_util.h"

using namespace lt;

namespace {

double logsig(double x) { return x < 0 ? x - std::log1p(std::exp(x)) : -std::log1p(std::exp(-x)); }

// Policy and reference log-probabilities of three pairs (chosen, rejected).
const std::vector<double> kPol{-3.0, -4.5, -2.0, -1.0, -7.25, -7.0};
const std::vector<double> kRef{-3.2, -4.0, -2.5, -1.1, -7.0, -7.5};

Tensor f64(const std::vector<double>& v) { return from_vector(v, {int64_t(v.size() / 2), 2}); }

std::vector<double> losses_of(DpoLoss kind, double beta, double ls, double gamma = 0.5) {
  PreferenceLossOptions o{kind, beta, ls, gamma};
  return preference_losses(f64(kPol), kind == DpoLoss::Simpo ? Tensor() : f64(kRef), o).to_double_vector();
}

TEST(DpoLoss, SigmoidIsTrlsFormulaInF64) {
  for (double ls : {0.0, 0.2}) {
    const std::vector<double> got = losses_of(DpoLoss::Sigmoid, 0.1, ls);
    ASSERT_EQ(got.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      const double h = (kPol[2 * i] - kPol[2 * i + 1]) - (kRef[2 * i] - kRef[2 * i + 1]);
      const double want = -logsig(0.1 * h) * (1 - ls) - logsig(-0.1 * h) * ls;
      EXPECT_NEAR(got[i], want, 1e-15 * std::abs(want)) << "pair " << i << " ls " << ls;
    }
  }
  // Pair 0 by hand: h = (-3 + 4.5) - (-3.2 + 4) = 0.7; -log sigmoid(0.07) = 0.65875955...
  EXPECT_NEAR(losses_of(DpoLoss::Sigmoid, 0.1, 0)[0], std::log1p(std::exp(-0.07)), 1e-15);
  EXPECT_NEAR(std::log1p(std::exp(-0.07)), 0.6587595555, 1e-9);
}

TEST(DpoLoss, IpoAndSimpoAreTrlsFormulasInF64) {
  const std::vector<double> ipo = losses_of(DpoLoss::Ipo, 0.5, 0);
  const std::vector<double> simpo = losses_of(DpoLoss::Simpo, 2.0, 0.1, 0.5);
  for (size_t i = 0; i < 3; ++i) {
    const double pi = kPol[2 * i] - kPol[2 * i + 1];
    const double h = pi - (kRef[2 * i] - kRef[2 * i + 1]);
    EXPECT_NEAR(ipo[i], (h - 1.0) * (h - 1.0), 1e-15) << i;  // 1 / (2 beta) = 1
    const double z = 2.0 * pi - 0.5;                          // beta (pi - gamma / beta)
    EXPECT_NEAR(simpo[i], -logsig(z) * 0.9 - logsig(-z) * 0.1, 1e-14) << i;
  }
}

TEST(DpoLoss, GradientsMatchFiniteDifferences) {
  for (DpoLoss kind : {DpoLoss::Sigmoid, DpoLoss::Ipo, DpoLoss::Simpo})
    for (double ls : {0.0, 0.3}) {
      if (kind == DpoLoss::Ipo && ls != 0) continue;
      PreferenceLossOptions o{kind, 0.7, ls, 0.4};
      Tensor pol = test::rand64({5, 2}, 3, -4.0, 4.0);
      Tensor ref = test::rand64({5, 2}, 4, -4.0, 4.0);
      ref.set_requires_grad(false);
      auto f = [&](const std::vector<Tensor>& x) { return preference_losses(x[0], kind == DpoLoss::Simpo ? Tensor() : ref, o); };
      EXPECT_TRUE(test::gradcheck(f, {pol})) << name_of(kind) << " ls " << ls;
    }
}

TEST(DpoLoss, LogSigmoidHoldsItsTailsInF32) {
  const std::vector<double> x{-100.0, -30.0, 0.0, 30.0, 90.0};
  const std::vector<double> got = log_sigmoid(from_vector(std::vector<float>(x.begin(), x.end()), {5})).to_double_vector();
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = logsig(x[i]);
    EXPECT_NEAR(got[i], want, 1e-6 * std::abs(want)) << x[i];  // log(sigmoid(30)) in f32 would be 0
  }
}

TEST(DpoLoss, MetricsAreTrlsRewardMeans) {
  const PreferenceMetrics m = preference_metrics(kPol, kRef, {DpoLoss::Sigmoid, 0.1, 0, 0});
  const double c[3] = {0.1 * 0.2, 0.1 * 0.5, 0.1 * -0.25}, r[3] = {0.1 * -0.5, 0.1 * 0.1, 0.1 * 0.5};
  EXPECT_NEAR(m.chosen, (c[0] + c[1] + c[2]) / 3, 1e-15);
  EXPECT_NEAR(m.rejected, (r[0] + r[1] + r[2]) / 3, 1e-15);
  EXPECT_NEAR(m.margin, m.chosen - m.rejected, 1e-15);
  EXPECT_DOUBLE_EQ(m.accuracy, 2.0 / 3.0);  // pair 2's chosen reward is below its rejected one
  const PreferenceMetrics s = preference_metrics(kPol, {}, {DpoLoss::Simpo, 2.0, 0, 0.5});
  EXPECT_NEAR(s.chosen, 2.0 * (kPol[0] + kPol[2] + kPol[4]) / 3, 1e-14);  // SimPO: beta x the policy's own
}

// ---- the pairs' rows ----

TEST(DpoData, PairRowsMaskThePromptAndPadTheRest) {
  auto pairs = std::make_shared<PreferencePairs>();
  const std::vector<int32_t> prompt{5, 6, 7}, chosen{8, 9, 2}, rejected{10, 2};
  pairs->train.add(prompt, chosen, rejected);
  PairDataset d(pairs, false, 8, 0);
  std::vector<int64_t> in(16), tg(16);
  std::vector<float> aux(4);
  d.get(0, in.data(), tg.data());
  d.get_aux(0, aux.data());
  const std::vector<int64_t> want_in{5, 6, 7, 8, 9, 2, 0, 0, 5, 6, 7, 10, 2, 0, 0, 0};
  const std::vector<int64_t> want_tg{-100, -100, 8, 9, 2, -100, -100, -100, -100, -100, 10, 2, -100, -100, -100, -100};
  EXPECT_EQ(in, want_in);
  EXPECT_EQ(tg, want_tg);
  EXPECT_EQ(aux, (std::vector<float>{0, 0, 3, 2}));
  d.set_reference({-1.5f, -2.5f});
  d.get_aux(0, aux.data());
  EXPECT_EQ(aux, (std::vector<float>{-1.5f, -2.5f, 3, 2}));
}

struct PairsFile {
  test::TempDir dir;
  std::string path;
  explicit PairsFile(const std::string& text, const std::string& name = "pairs.jsonl") {
    path = (dir.path / name).string();
    std::ofstream(path) << text;
  }
};

std::string tokenizer_dir() { return std::string(LT_TEST_DATA_DIR) + "/tokenizers/sentencepiece"; }

// The one-line error of loading `text` as pairs (with a context of `seq` tokens).
std::string load_error(const std::string& text, int64_t seq = 64) {
  PairsFile f(text);
  auto tok = text::load_tokenizer_json(tokenizer_dir() + "/tokenizer.json");
  PairOptions o;
  o.seq_len = seq;
  try {
    load_preference_pairs(f.path, *tok, o);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(DpoData, TokenizesAsTheSftPairsAndEndsCompletionsWithEos) {
  PairsFile f("{\"prompt\": \"Q: two?\\nA:\", \"chosen\": \" 2\", \"rejected\": \" 3\"}\n\n"
              "{\"prompt\": \"Hi\", \"chosen\": \" 2\", \"rejected\": \" you there, and a long answer that goes on and on for many more words than fit\", \"extra\": 1}\n");
  auto tok = text::load_tokenizer_json(tokenizer_dir() + "/tokenizer.json");
  PairOptions o;
  o.val_fraction = 0;
  PreferencePairs p = load_preference_pairs(f.path, *tok, o);
  ASSERT_EQ(p.train.size(), 2);
  const std::vector<int32_t> prompt = tok->encode("Q: two?\nA:", true), chosen = tok->encode(" 2", false);
  const auto& ids = p.train.ids;
  const auto& off = p.train.offsets;
  EXPECT_EQ(std::vector<int32_t>(ids.begin() + off[0], ids.begin() + off[1]), prompt);
  std::vector<int32_t> want_c = chosen;
  want_c.push_back(*tok->eos_id());
  EXPECT_EQ(std::vector<int32_t>(ids.begin() + off[1], ids.begin() + off[2]), want_c);
  // Every round(1 / val_fraction)-th pair validates; a completion too long for the context is cut at its end.
  o.val_fraction = 0.5;
  const int64_t np0 = int64_t(prompt.size()), np1 = int64_t(tok->encode("Hi", true).size());
  o.seq_len = np0 + 3;
  ASSERT_LT(np1, np0);
  p = load_preference_pairs(f.path, *tok, o);
  EXPECT_EQ(p.train.size(), 1);
  ASSERT_EQ(p.val.size(), 1);
  EXPECT_EQ(p.truncated, 1);
  EXPECT_EQ(p.val.offsets[3] - p.val.offsets[2], o.seq_len + 1 - np1);  // the rejected completion, cut
  EXPECT_EQ(p.val.offsets[2] - p.val.offsets[1], int64_t(chosen.size()) + 1);  // " 2" and EOS fit
}

TEST(DpoData, BadLinesAreOneLineErrorsNamingTheLine) {
  auto has = [](const std::string& err, const std::string& part) {
    EXPECT_NE(err.find(part), std::string::npos) << err;
  };
  has(load_error("{\"prompt\": \"a\", \"chosen\": \"b\"}\n"), "pairs.jsonl:1: it has no \"rejected\" field");
  has(load_error("\n{\"prompt\": \"a\", \"chosen\": \"\", \"rejected\": \"c\"}\n"), "pairs.jsonl:2: field \"chosen\" is empty");
  has(load_error("{\"prompt\": \"a\", \"response\": \"b\"}\n"), "it is SFT data, and --objective dpo trains on preference pairs");
  has(load_error("{\"text\": \"a\"}\n"), "it is SFT data");
  has(load_error("{\"prompt\": 3, \"chosen\": \"b\", \"rejected\": \"c\"}\n"), "field \"prompt\" is number, not a string");
  has(load_error("[1, 2]\n"), "it is a JSON array, not an object");
  has(load_error("{\"prompt\": \"a\", \"chosen\": [{\"role\": \"assistant\", \"content\": \"b\"}], \"rejected\": \"c\"}\n"),
      "is a list of messages and another field of the pair is not");
  has(load_error("{\"prompt\": \"" + std::string(200, 'x') + "\", \"chosen\": \"b\", \"rejected\": \"c\"}\n", 8),
      "leaves no room for its completions");
  has(load_error("\n \n"), "no preference pairs");
  for (const std::string& e : {load_error("{\"prompt\": \"a\", \"chosen\": \"b\"}\n"), load_error("[1]\n")})
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

TEST(DpoData, ConversationalPairsAreRenderedAsTrlRendersThem) {
  // An explicit prompt and an implicit one (the messages chosen and rejected share) give the
  // same pair: the prompt rendered with the generation prompt, each completion the rest of the
  // prompt + completion's rendering, encoded without special tokens and with no EOS added.
  const text::ChatTemplate tmpl =
      text::ChatTemplate::load(std::string(LT_TEST_DATA_DIR) + "/chat_templates/zephyr/tokenizer_config.json");
  auto tok = text::load_tokenizer_json(tokenizer_dir() + "/tokenizer.json");
  PairsFile f(
      "{\"prompt\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"chosen\": [{\"role\": \"assistant\", "
      "\"content\": \"Hello there\"}], \"rejected\": [{\"role\": \"assistant\", \"content\": \"Go away\"}]}\n"
      "{\"chosen\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \"Hello "
      "there\"}], \"rejected\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": "
      "\"Go away\"}]}\n");
  PairOptions o;
  o.val_fraction = 0;
  o.chat_template = [&]() -> const text::ChatTemplate& { return tmpl; };
  PreferencePairs p = load_preference_pairs(f.path, *tok, o);
  ASSERT_EQ(p.train.size(), 2);
  const text::OrderedJson user = text::OrderedJson::parse("[{\"role\": \"user\", \"content\": \"Hi\"}]");
  const std::string prompt = tmpl.generation_prompt(user);
  text::OrderedJson all = user;
  all.push_back(text::OrderedJson::parse("{\"role\": \"assistant\", \"content\": \"Hello there\"}"));
  const std::string whole = tmpl.render(all);
  ASSERT_EQ(whole.substr(0, prompt.size()), prompt);
  const std::vector<int32_t> want_p = tok->encode(prompt, false), want_c = tok->encode(whole.substr(prompt.size()), false);
  const auto& ids = p.train.ids;
  for (int i = 0; i < 2; ++i) {
    const int64_t* off = p.train.offsets.data() + 3 * i;
    EXPECT_EQ(std::vector<int32_t>(ids.begin() + off[0], ids.begin() + off[1]), want_p) << i;
    EXPECT_EQ(std::vector<int32_t>(ids.begin() + off[1], ids.begin() + off[2]), want_c) << i;
  }
  // Without a template, and with a prompt that ends on the assistant, one line each.
  auto err = [&](const std::string& line, bool with_template) {
    PairsFile g(line);
    PairOptions q;
    if (with_template) q.chat_template = o.chat_template;
    try {
      load_preference_pairs(g.path, *tok, q);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string conv =
      "{\"chosen\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \"a\"}], "
      "\"rejected\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \"b\"}]}\n";
  EXPECT_NE(err(conv, false).find("pairs.jsonl:1: its pair is a conversation (lists of messages), and this run has no chat template"),
            std::string::npos)
      << err(conv, false);
  const std::string ends = "{\"prompt\": [{\"role\": \"assistant\", \"content\": \"x\"}], \"chosen\": [{\"role\": "
                           "\"assistant\", \"content\": \"a\"}], \"rejected\": [{\"role\": \"assistant\", \"content\": \"b\"}]}\n";
  EXPECT_NE(err(ends, true).find("its prompt ends with an assistant message"), std::string::npos) << err(ends, true);
  EXPECT_NE(err("{\"prompt\": \"x\", \"chosen\": [{\"role\": \"assistant\"}], \"rejected\": \"b\"}\n", true)
                .find("is a list of messages and another field of the pair is not"),
            std::string::npos);
}

// ---- the reference ----

RunConfig dpo_run(const std::filesystem::path& dir, int pairs = 24) {
  std::string text;
  const char* words[] = {"red", "green", "blue", "seven", "cat", "dog", "tree", "stone"};
  for (int i = 0; i < pairs; ++i)
    text += std::string("{\"prompt\": \"Say a word about ") + words[i % 8] + ":\", \"chosen\": \" " + words[(i + 3) % 8] +
            " is good\", \"rejected\": \" " + words[(i + 5) % 8] + " " + words[i % 8] + " no\"}\n";
  std::ofstream(dir / "pairs.jsonl") << text;
  RunConfig c;
  c.model = "llama-tiny";
  c.tokenizer = tokenizer_dir();
  c.data = (dir / "pairs.jsonl").string();
  c.objective = Objective::Dpo;
  c.seq_len = 24;
  c.batch = 4;
  c.steps = 3;
  c.lr = 1e-2;
  c.warmup = 0;
  c.schedule = ScheduleKind::Constant;
  c.eval_batches = 1;
  c.device = "cpu";
  c.workers = 1;
  return c;
}

// Each pair's log-probabilities, one pair at a time, in inference mode.
std::vector<double> logps_one_by_one(models::Model& m, const PairDataset& d) {
  InferenceModeGuard inference;
  std::vector<double> out;
  const int64_t T = d.input_shape()[1];
  for (int64_t i = 0; i < d.size(); ++i) {
    std::vector<int64_t> in(size_t(2 * T)), tg(size_t(2 * T));
    d.get(i, in.data(), tg.data());
    std::vector<double> v = sequence_logps(m, from_ints(in, {2, T}), from_ints(tg, {2, T})).to_double_vector();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

TEST(DpoReference, AdaptersOffIsTheBaseModel) {
  // A LLaMA (fused q|k|v and gate|up GEMMs with the adapters' updates added after them) and a
  // GPT-2 (one Conv1D per projection): with adapters off, the model computes its base exactly.
  for (const char* preset : {"llama-tiny", "gpt2-tiny"}) {
    nn::InitOptions init;
    init.seed = 5;
    auto base = models::create_model(preset, init);
    auto with = models::create_model(preset, init);
    RunConfig c;
    c.lora_rank = 4;
    apply_lora(*with, c);
    for (auto& [name, p] : with->named_parameters())  // B = 0 would hide a missed switch
      if (name.find("lora_B") != std::string::npos) copy_(p, scale(test::rand64(p.shape(), 9), 0.05));
    const int64_t T = 12;
    std::vector<int64_t> a(size_t(4 * T)), b(size_t(4 * T));
    for (size_t i = 0; i < a.size(); ++i) a[i] = int64_t(i * 37 + 11) % 200, b[i] = i % 5 == 0 ? -100 : int64_t(i * 53 + 7) % 200;
    Tensor ids = from_ints(a, {4, T}), tg = from_ints(b, {4, T});
    Tensor want = sequence_logps(*base, ids, tg);
    Tensor on = sequence_logps(*with, ids, tg);
    Tensor off;
    {
      InferenceModeGuard inference;
      nn::AdaptersOffScope scope;
      off = sequence_logps(*with, ids, tg);
    }
    EXPECT_EQ(test::bytes_of(off), test::bytes_of(want)) << preset;
    EXPECT_NE(test::bytes_of(on), test::bytes_of(want)) << preset;
    EXPECT_FALSE(nn::adapters_off());
  }
}

TEST(DpoReference, LoraRunStartsAtLn2AndItsReferenceStaysTheBase) {
  test::TempDir dir;
  RunConfig c = dpo_run(dir.path);
  c.lora_rank = 4;
  test::TrainerRun run(c);
  ASSERT_EQ(run.task->objective->reference(), PreferenceObjective::Reference::AdaptersOff);
  // B = 0: the policy is its reference, every pair's loss is -log sigmoid(0).
  StepOutcome o = run->step();
  EXPECT_NEAR(o.loss, std::log(2.0), 1e-6);
  ASSERT_EQ(o.metrics.size(), 4u);
  EXPECT_EQ(o.metrics[0].name, "rewards/chosen");
  for (const Metric& m : o.metrics)
    if (m.name != "rewards/accuracies") EXPECT_NEAR(m.value, 0.0, 1e-6) << m.name;
  o = run->step();
  o = run->step();
  EXPECT_LT(o.loss, std::log(2.0));  // training moves the policy's margin up
  EXPECT_GT(o.metrics[3].value, 0.0);
}

TEST(DpoReference, PrecomputedEqualsAFrozenCopyOfTheStartingWeights) {
  test::TempDir dir;
  RunConfig c = dpo_run(dir.path);
  test::TrainerRun run(c);  // start(): the reference pass
  ASSERT_EQ(run.task->objective->reference(), PreferenceObjective::Reference::Precomputed);
  EXPECT_FALSE(run.task->objective->needs_reference_pass());
  // The frozen copy: the same preset and seed, built on its own, never trained.
  nn::InitOptions init;
  init.seed = c.seed;
  auto frozen = models::create_model("llama-tiny", init);
  auto& train = static_cast<const PairDataset&>(run->loader().dataset());
  const std::vector<double> want = logps_one_by_one(*frozen, train);
  const std::vector<float>& got = train.reference();
  ASSERT_EQ(got.size(), want.size());
  ASSERT_EQ(train.size(), 22);  // 24 pairs, every 10th validates
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * std::abs(want[i])) << i;
  StepOutcome o = run->step();
  EXPECT_NEAR(o.loss, std::log(2.0), 1e-5);  // policy = reference, up to the batches' rounding
  run->step();
  // The weights moved; the reference did not.
  const std::vector<double> now = logps_one_by_one(run->model(), train);
  double moved = 0;
  for (size_t i = 0; i < now.size(); ++i) moved = std::max(moved, std::abs(now[i] - want[i]));
  EXPECT_GT(moved, 1e-3);
  EXPECT_EQ(train.reference(), got);
}

TEST(DpoReference, ACheckpointKeepsTheReferenceAndResumesExactly) {
  test::TempDir dir;
  RunConfig c = dpo_run(dir.path);
  c.steps = 4;
  const RunResult whole = train(c);
  c.stop_at = 2;
  c.save = (dir.path / "ckpt").string();
  train(c);
  ASSERT_TRUE(std::filesystem::exists(dir.path / "ckpt" / PreferenceObjective::kReferenceFile));
  RunConfig r = c;
  r.stop_at = 0;
  r.resume = c.save;
  r.save.clear();
  const RunResult rest = train(r);
  ASSERT_EQ(rest.losses.size(), 2u);
  EXPECT_DOUBLE_EQ(rest.losses[1], whole.losses[3]);
  ASSERT_EQ(rest.final_metrics.size(), 4u);
  EXPECT_DOUBLE_EQ(rest.final_metrics[3].value, whole.final_metrics[3].value);
}

TEST(DpoReference, AccumulatedMicroBatchesEqualOneBatch) {
  test::TempDir dir;
  RunConfig a = dpo_run(dir.path);
  a.lora_rank = 4;
  a.steps = 2;
  RunConfig b = a;
  b.micro_batch = 2;
  const RunResult ra = train(a), rb = train(b);
  for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(ra.losses[i], rb.losses[i], 1e-6) << i;
  EXPECT_NEAR(ra.final_metrics[3].value, rb.final_metrics[3].value, 1e-6);
}

// ---- the plan ----

TEST(DpoPlan, PlanEqualsTheCpuRunsPeak) {
  test::TempDir dir;
  for (int lora : {0, 4})
    for (const char* checkpoint : {"none", "blocks"}) {
      RunConfig c = dpo_run(dir.path, 40);
      c.lora_rank = lora;
      c.micro_batch = 2;
      c.checkpoint = parse_checkpoint_flag(checkpoint);
      PlanResult p = plan_run(c, PlanOptions{"cpu"});
      const int64_t before = allocator_for(Device::cpu()).stats().allocated_bytes.current;
      RunResult r = train(c);
      EXPECT_EQ(r.memory.allocated_bytes.peak - before, p.peak_allocated) << "lora " << lora << " " << checkpoint;
    }
}

TEST(DpoPlan, TheReferencePassOfACudaPlanStopsWhereItsCycleEnds) {
  // A CUDA plan's meta pass stops once the caching allocator's layout repeats; ten times the pairs
  // (ten times the pass) must give the same peaks, allocated and reserved.
  test::TempDir a, b;
  RunConfig small = dpo_run(a.path, 40), large = dpo_run(b.path, 400);
  for (RunConfig* c : {&small, &large}) {
    c->micro_batch = 2;
    c->steps = 2;
  }
  const PlanResult ps = plan_run(small, PlanOptions{"cuda"}), pl = plan_run(large, PlanOptions{"cuda"});
  EXPECT_EQ(ps.peak_allocated, pl.peak_allocated);
  EXPECT_EQ(ps.peak_reserved, pl.peak_reserved);
}

// ---- the recipe ----

TEST(DpoRecipe, TheObjectiveIsSavedAndOlderConfigsReadAsSft) {
  RunConfig c;
  c.objective = Objective::Dpo;
  c.dpo_loss = DpoLoss::Ipo;
  c.beta = 0.25;
  RunConfig back = config_from_json(config_to_json(c));
  EXPECT_EQ(back.objective, Objective::Dpo);
  EXPECT_EQ(back.dpo_loss, DpoLoss::Ipo);
  EXPECT_EQ(back.beta, 0.25);
  nlohmann::json j = nlohmann::json::parse(config_to_json(RunConfig{}));
  for (const char* k : {"objective", "dpo_loss", "beta", "label_smoothing", "simpo_gamma", "chosen_field", "rejected_field"})
    j.erase(k);
  EXPECT_EQ(config_from_json(j.dump()).objective, Objective::Sft);
  j.erase("batch");  // an older field stays required
  EXPECT_THROW(config_from_json(j.dump()), Error);
}

TEST(DpoRecipe, BadValuesAreRefused) {
  RunConfig c;
  c.objective = Objective::Dpo;
  c.beta = 0;
  EXPECT_THROW(validate(c), UsageError);
  c.beta = 0.1;
  c.label_smoothing = 0.7;
  EXPECT_THROW(validate(c), UsageError);
  c.label_smoothing = 0.1;
  c.dpo_loss = DpoLoss::Ipo;
  EXPECT_THROW(validate(c), UsageError);
  c.dpo_loss = DpoLoss::Sigmoid;
  c.chosen_field = "prompt";
  EXPECT_THROW(validate(c), UsageError);
}

}  // namespace
