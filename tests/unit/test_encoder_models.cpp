// BERT-family classifiers on the CPU: logits of right-padded batches against a reference written
// with plain ops (separate q/k/v GEMMs, explicit scores with an additive mask, softmax) in f64 for
// the three families; padding changes no logit; parameter counts and names against transformers';
// config.json round trips and refusals; checkpoint names; and the labelled-text data.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "leantrain/autograd.h"
#include "leantrain/data.h"
#include "leantrain/error.h"
#include "models/encoder.h"
#include "models/registry.h"
#include "text/tokenizer.h"
#include "unit/block_sparse_reference.h"
#include "unit/max_abs_diff.h"

using namespace lt;
using models::EncoderClassifier;
using models::EncoderConfig;

namespace {

EncoderConfig small(const std::string& type) {
  EncoderConfig c = EncoderConfig::defaults(type);
  c.vocab_size = 50, c.hidden_size = 16, c.num_hidden_layers = 2, c.num_attention_heads = 4, c.intermediate_size = 24;
  c.max_position_embeddings = 20, c.num_labels = 3, c.hidden_dropout_prob = 0, c.classifier_dropout = 0;
  if (type == "roberta") c.type_vocab_size = 1;
  return c;
}

void randomize(nn::Module& m, uint64_t seed) {
  Generator gen(seed);
  NoGradGuard ng;
  for (auto& [n, p] : m.named_parameters()) copy_(p, randn(p.shape(), gen, 0.4f, p.dtype()));
}

// transformers' forward with attention_mask, from plain ops; `ids` right-padded with pad.
// layer_bias: one [B, 1, T, T] score bias per layer that replaces the padding mask (BigBird's
// block-sparse pattern), or none.
Tensor reference_logits(const EncoderConfig& c, const nn::Module& m, const std::vector<int64_t>& ids, int64_t B,
                        int64_t T, const std::vector<Tensor>& layer_bias = {}) {
  auto P = [&](const std::string& name) { return m.parameter(name); };
  const std::string b = c.base_name() + ".";
  const int64_t H = c.hidden_size, nh = c.num_attention_heads, d = H / nh, off = c.position_offset();
  Tensor x = embedding(from_ints(ids, {B, T}), P(b + "embeddings.word_embeddings.weight"));
  x = add(x, slice(P(b + "embeddings.position_embeddings.weight"), 0, off, off + T));
  if (c.type_vocab_size > 0) x = add(x, select(P(b + "embeddings.token_type_embeddings.weight"), 0, 0));
  x = layer_norm(x, P(b + "embeddings.LayerNorm.weight"), P(b + "embeddings.LayerNorm.bias"), c.layer_norm_eps);
  std::vector<double> bias(size_t(B * T));
  for (size_t i = 0; i < bias.size(); ++i) bias[i] = ids[i] == c.pad_token_id ? -1e30 : 0.0;
  const Tensor padding = from_vector(bias, {B, 1, 1, T});
  const bool distil = c.distil();
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = b + (distil ? "transformer.layer." : "encoder.layer.") + std::to_string(l) + ".";
    auto lin = [&](const Tensor& in, const std::string& name) { return linear(in, P(p + name + ".weight"), P(p + name + ".bias")); };
    auto heads = [&](const Tensor& t) { return permute(reshape(t, {B, T, nh, d}), {0, 2, 1, 3}); };
    const Tensor q = heads(lin(x, distil ? "attention.q_lin" : "attention.self.query"));
    const Tensor k = heads(lin(x, distil ? "attention.k_lin" : "attention.self.key"));
    const Tensor v = heads(lin(x, distil ? "attention.v_lin" : "attention.self.value"));
    const Tensor& mask = layer_bias.empty() ? padding : layer_bias[size_t(l)];
    Tensor s = add(scale(matmul(q, k, false, true), 1.0 / std::sqrt(double(d))), mask);
    Tensor a = reshape(permute(matmul(softmax(s), v), {0, 2, 1, 3}), {B, T, H});
    a = lin(a, distil ? "attention.out_lin" : "attention.output.dense");
    const std::string ln1 = distil ? "sa_layer_norm" : "attention.output.LayerNorm";
    Tensor h = layer_norm(add(x, a), P(p + ln1 + ".weight"), P(p + ln1 + ".bias"), c.layer_norm_eps);
    Tensor f = lin(gelu(lin(h, distil ? "ffn.lin1" : "intermediate.dense"), c.gelu_approx()), distil ? "ffn.lin2" : "output.dense");
    const std::string ln2 = distil ? "output_layer_norm" : "output.LayerNorm";
    x = layer_norm(add(h, f), P(p + ln2 + ".weight"), P(p + ln2 + ".bias"), c.layer_norm_eps);
  }
  Tensor first = select(x, 1, 0);
  if (c.model_type == "bert")
    return linear(tanh(linear(first, P("bert.pooler.dense.weight"), P("bert.pooler.dense.bias"))),
                  P("classifier.weight"), P("classifier.bias"));
  if (c.model_type == "roberta" || c.big_bird()) {
    Tensor d = linear(first, P("classifier.dense.weight"), P("classifier.dense.bias"));
    return linear(c.big_bird() ? gelu(d, c.gelu_approx()) : tanh(d), P("classifier.out_proj.weight"),
                  P("classifier.out_proj.bias"));
  }
  return linear(relu(linear(first, P("pre_classifier.weight"), P("pre_classifier.bias"))), P("classifier.weight"),
                P("classifier.bias"));
}

using test::max_abs_diff;

class EncoderFamilies : public ::testing::TestWithParam<std::string> {};

TEST_P(EncoderFamilies, PaddedLogitsMatchThePlainOpReference) {
  const EncoderConfig c = small(GetParam());
  EncoderClassifier m(c, nn::InitOptions{.dtype = DType::F64, .seed = 3});
  randomize(m, 11);
  m.eval();
  const int64_t B = 3, T = 7, pad = c.pad_token_id;
  // Row 0 full, row 1 two pads, row 2 five pads; no real token is the pad id.
  std::vector<int64_t> ids = {5, 9, 13, 4, 7, 22, 31, 8, 3, 17, 6, 40, pad, pad, 2, 44, pad, pad, pad, pad, pad};
  NoGradGuard ng;
  Tensor got = m.forward(from_ints(ids, {B, T}));
  ASSERT_EQ(got.shape(), (Shape{B, 3}));
  EXPECT_LT(max_abs_diff(got, reference_logits(c, m, ids, B, T)), 1e-10);
  // Padding changes nothing: row 2 alone, without its pads, gives the same logits.
  Tensor alone = m.forward(from_ints({2, 44}, {1, 2}));
  EXPECT_LT(max_abs_diff(alone, select(got, 0, 2)), 1e-10);
  // An explicit mask equal to the padding one gives the same logits.
  std::vector<int64_t> mask(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) mask[i] = ids[i] != pad;
  EXPECT_LT(max_abs_diff(m.forward(from_ints(ids, {B, T}), from_ints(mask, {B, T})), got), 1e-12);
}

// Every parameter's gradient of the padded batch's loss against the reference's (whose ops are
// unfused: separate q/k/v GEMMs, unfused norms and GELU), in f64.
TEST_P(EncoderFamilies, GradientsMatchThePlainOpReference) {
  const EncoderConfig c = small(GetParam());
  EncoderClassifier m(c, nn::InitOptions{.dtype = DType::F64, .seed = 3});
  randomize(m, 12);
  m.eval();
  const int64_t B = 3, T = 5, pad = c.pad_token_id;
  std::vector<int64_t> ids = {5, 9, 13, 4, pad, 22, 31, 8, pad, pad, 17, 6, 40, 2, 3};
  const Tensor y = from_ints({0, 1, 2}, {3});
  m.loss(from_ints(ids, {B, T}), y).backward();
  std::map<std::string, Tensor> ours;
  for (auto& [n, p] : m.named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << n;
    ours[n] = p.grad();
    p.set_grad(Tensor());
  }
  cross_entropy(reference_logits(c, m, ids, B, T), y).backward();
  for (auto& [n, p] : m.named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << n;
    EXPECT_LT(max_abs_diff(ours[n], p.grad()), 1e-10) << GetParam() << " " << n;
  }
}

INSTANTIATE_TEST_SUITE_P(Encoders, EncoderFamilies, ::testing::Values("bert", "roberta", "distilbert", "big_bird"));

// BigBird block_sparse: 35 positions in blocks of 4 (more than (5 + 2) blocks) are padded to 9
// blocks; eval mode's pattern (random blocks = block 0) and a training draw, against the plain-op
// reference with the pattern as a score bias; logits and every gradient.
TEST(EncoderModels, BigBirdBlockSparseMatchesThePlainOpReference) {
  EncoderConfig c = small("big_bird");
  c.attention_type = "block_sparse", c.block_size = 4, c.num_random_blocks = 1, c.max_position_embeddings = 40;
  EncoderClassifier m(c, nn::InitOptions{.dtype = DType::F64, .seed = 3});
  randomize(m, 13);
  const int64_t B = 2, T = 35, Tp = 36, n = 9, pad = c.pad_token_id;
  std::vector<int64_t> ids(size_t(B * T)), padded(size_t(B * Tp), pad), keys(size_t(B * Tp), 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t id = b == 1 && t >= 29 ? pad : 1 + (7 * t + 3 * b) % 49;  // row 1: six pads
      ids[size_t(b * T + t)] = padded[size_t(b * Tp + t)] = id;
      keys[size_t(b * Tp + t)] = id != pad;
    }
  std::vector<nn::BlockSparseAttentionCore*> cores;
  for (auto& [path, mod] : m.named_modules())
    if (auto* k = dynamic_cast<nn::BlockSparseAttentionCore*>(mod)) cores.push_back(k);
  ASSERT_EQ(cores.size(), 2u);
  const Tensor y = from_ints({0, 2}, {2});
  for (bool training : {false, true}) {
    SCOPED_TRACE(training ? "training (random blocks drawn)" : "eval");
    m.train(training);
    std::vector<uint64_t> offsets;
    for (auto* k : cores) offsets.push_back(k->generator().offset);
    Tensor logits = m.forward(from_ints(ids, {B, T}));
    cross_entropy(logits, y).backward();
    std::map<std::string, Tensor> ours;
    for (auto& [name, p] : m.named_parameters()) {
      ASSERT_TRUE(p.grad().defined()) << name;
      ours[name] = p.grad();
      p.set_grad(Tensor());
    }
    // Each layer's table, drawn again from its generator rewound to where the forward started.
    std::vector<Tensor> biases;
    for (size_t l = 0; l < cores.size(); ++l) {
      EXPECT_EQ(cores[l]->generator().offset > offsets[l], training);
      cores[l]->generator().offset = offsets[l];
      biases.push_back(test::listed_bias(cores[l]->block_table(n, training), n, c.block_size, keys, B));
    }
    Tensor ref = reference_logits(c, m, padded, B, Tp, biases);
    EXPECT_LT(max_abs_diff(logits, ref), 1e-10);
    if (!training) {  // an explicit mask is padded to whole blocks like the ids
      std::vector<int64_t> flags(ids.size());
      for (size_t i = 0; i < ids.size(); ++i) flags[i] = ids[i] != pad;
      NoGradGuard ng;
      EXPECT_LT(max_abs_diff(m.forward(from_ints(ids, {B, T}), from_ints(flags, {B, T}, DType::U8)), logits), 1e-12);
    }
    cross_entropy(ref, y).backward();
    for (auto& [name, p] : m.named_parameters()) {
      EXPECT_LT(max_abs_diff(ours[name], p.grad()), 1e-10) << name;
      p.set_grad(Tensor());
    }
  }
}

TEST(EncoderModels, ParameterCountsAndNamesAreTransformers) {
  const nn::InitOptions meta{.device = Device::meta()};
  // BertForSequenceClassification etc. with 2 labels, as transformers counts them.
  for (auto [name, count] : {std::pair{"bert-base-uncased", 109483778.0}, {"roberta-base", 124647170.0},
                             {"distilbert-base-uncased", 66955010.0}}) {
    auto cfg = models::config_from_preset(name);
    EXPECT_EQ(cfg->size().parameters, count) << name;
    EXPECT_EQ(double(cfg->build(meta)->num_parameters()), count) << name;
  }
  auto names = [&](const char* preset) {
    std::map<std::string, Shape> out;
    for (auto& [n, p] : models::config_from_preset(preset)->build(meta)->named_parameters()) out[n] = p.shape();
    return out;
  };
  auto bert = names("bert-tiny");
  EXPECT_EQ(bert.at("bert.embeddings.word_embeddings.weight"), (Shape{30522, 128}));
  EXPECT_EQ(bert.at("bert.embeddings.token_type_embeddings.weight"), (Shape{2, 128}));
  EXPECT_EQ(bert.at("bert.encoder.layer.1.attention.self.value.bias"), (Shape{128}));
  EXPECT_EQ(bert.at("bert.encoder.layer.0.attention.output.LayerNorm.weight"), (Shape{128}));
  EXPECT_EQ(bert.at("bert.encoder.layer.0.intermediate.dense.weight"), (Shape{512, 128}));
  EXPECT_EQ(bert.at("bert.encoder.layer.1.output.dense.weight"), (Shape{128, 512}));
  EXPECT_EQ(bert.at("bert.pooler.dense.weight"), (Shape{128, 128}));
  EXPECT_EQ(bert.at("classifier.weight"), (Shape{2, 128}));
  auto roberta = names("roberta-tiny");
  EXPECT_EQ(roberta.at("roberta.embeddings.position_embeddings.weight"), (Shape{514, 128}));
  EXPECT_EQ(roberta.at("classifier.dense.weight"), (Shape{128, 128}));
  EXPECT_EQ(roberta.at("classifier.out_proj.bias"), (Shape{2}));
  EXPECT_EQ(roberta.count("roberta.pooler.dense.weight"), 0u);
  auto distil = names("distilbert-tiny");
  EXPECT_EQ(distil.at("distilbert.transformer.layer.0.attention.q_lin.weight"), (Shape{128, 128}));
  EXPECT_EQ(distil.at("distilbert.transformer.layer.1.ffn.lin1.weight"), (Shape{512, 128}));
  EXPECT_EQ(distil.at("distilbert.transformer.layer.1.output_layer_norm.bias"), (Shape{128}));
  EXPECT_EQ(distil.at("pre_classifier.weight"), (Shape{128, 128}));
  EXPECT_EQ(distil.count("distilbert.embeddings.token_type_embeddings.weight"), 0u);
  auto bigbird = names("bigbird-tiny");  // BigBirdForSequenceClassification: the base is "bert", a RoBERTa-style head
  EXPECT_EQ(bigbird.at("bert.encoder.layer.1.attention.self.query.weight"), (Shape{128, 128}));
  EXPECT_EQ(bigbird.at("bert.embeddings.position_embeddings.weight"), (Shape{1024, 128}));
  EXPECT_EQ(bigbird.at("classifier.out_proj.weight"), (Shape{2, 128}));
  EXPECT_EQ(bigbird.count("bert.pooler.weight"), 0u);  // transformers' pooler feeds no classifier
  // google/bigbird-roberta-base with a 2-class head, less its unused pooler (768 * 768 + 768).
  EXPECT_EQ(models::config_from_preset("bigbird-roberta-base")->size().parameters, 128060930.0 - 590592.0);
}

TEST(EncoderModels, PaddingRowsStartAtZero) {
  EncoderClassifier m(small("roberta"), nn::InitOptions{.seed = 1});
  for (const char* t : {"roberta.embeddings.word_embeddings.weight", "roberta.embeddings.position_embeddings.weight"}) {
    for (double v : select(m.parameter(t), 0, 1).to_double_vector()) EXPECT_EQ(v, 0.0) << t;
    double norm = 0;
    for (double v : select(m.parameter(t), 0, 3).to_double_vector()) norm += v * v;
    EXPECT_GT(norm, 0.0) << t;
  }
}

TEST(EncoderModels, ConfigJsonRoundTripsAndKeepsClassNames) {
  for (const char* type : {"bert", "roberta", "distilbert", "big_bird"}) {
    EncoderConfig c = small(type);
    c.labels = {"art", "food", "love"};
    const std::string j = c.to_json();
    auto back = models::config_from_json(j);
    EXPECT_EQ(back->to_json(), j) << type;
    EXPECT_EQ(back->sequences().classes, 3);
  }
  // Unnamed classes: num_labels, from which transformers derives LABEL_0 ... itself.
  const nlohmann::json unnamed = nlohmann::json::parse(small("bert").to_json());
  EXPECT_EQ(unnamed.at("num_labels"), 3);
  EXPECT_FALSE(unnamed.contains("id2label"));
  EXPECT_EQ(models::config_from_json(unnamed.dump())->to_json(), small("bert").to_json());
  const nlohmann::json d = nlohmann::json::parse(small("distilbert").to_json());
  EXPECT_EQ(d.at("dim"), 16);
  EXPECT_EQ(d.at("n_layers"), 2);
  EXPECT_EQ(d.at("architectures")[0], "DistilBertForSequenceClassification");
  EXPECT_FALSE(d.contains("hidden_size"));
}

std::string error_of(const std::string& json) {
  try {
    models::config_from_json(json);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(EncoderModels, BadConfigsAreOneLineErrors) {
  EXPECT_NE(error_of(R"({"model_type": "bert", "hidden_act": "relu"})").find("hidden_act 'relu'"), std::string::npos);
  EXPECT_NE(error_of(R"({"model_type": "distilbert", "sinusoidal_pos_embds": true})").find("sinusoidal"), std::string::npos);
  EXPECT_NE(error_of(R"({"model_type": "bert", "id2label": {"0": "a", "2": "b"}})").find("id2label has the key '2'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model_type": "bert", "num_labels": 3, "id2label": {"0": "a", "1": "b"}})").find("num_labels 3"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model_type": "bert", "pad_token_id": 40000})").find("pad_token_id 40000"), std::string::npos);
  EXPECT_NE(error_of(R"({"model_type": "roberta", "max_position_embeddings": 2})").find("max_position_embeddings 2"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model_type": "bert", "problem_type": "regression"})").find("problem_type"), std::string::npos);
  EXPECT_NE(error_of(R"({"model_type": "bert", "hidden_size": 10, "num_attention_heads": 3})").find("not divisible"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model_type": "bert", "num_hidden_layers": 100000000})").find("n"), std::string::npos);
  EXPECT_NE(error_of(R"({"model_type": "big_bird", "attention_type": "sliding"})").find("attention_type 'sliding'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model_type": "big_bird", "use_bias": false})").find("use_bias"), std::string::npos);
  EXPECT_NE(error_of(R"({"model_type": "big_bird", "block_size": 0})").find("block_size 0"), std::string::npos);
  // A family default (RoBERTa's eos 2) is checked against the vocab_size the file gives, as
  // config.json writes it back (a fuzzer's find: the file read, its own copy did not).
  EXPECT_NE(error_of(R"({"model_type": "roberta", "vocab_size": 2, "pad_token_id": 0})").find("'eos_token_id' = 2"),
            std::string::npos);
  for (const char* s : {R"({"model_type": "bert", "hidden_act": "relu"})", R"({"model_type": "bert", "num_labels": 0})"})
    EXPECT_EQ(error_of(s).find('\n'), std::string::npos);
}

TEST(EncoderModels, ForwardRefusesBadInputs) {
  EncoderClassifier m(small("bert"), nn::InitOptions{});
  EXPECT_THROW(m.forward(from_ints({1, 2, 3}, {3})), Error);                        // not [B, T]
  EXPECT_THROW(m.forward(from_vector(std::vector<float>{1, 2}, {1, 2})), Error);   // not ids
  EXPECT_THROW(m.forward(from_ints(std::vector<int64_t>(21, 3), {1, 21})), Error);  // 21 > 20 positions
  EXPECT_THROW(m.forward(from_ints({1, 2}, {1, 2}), from_ints({1, 1, 1}, {1, 3})), Error);  // mask shape
  EXPECT_THROW(m.forward(from_ints({1, 60}, {1, 2})), Error);                       // id 60 >= vocab 50
}

TEST(EncoderModels, CheckpointNamesOfPretrainingFilesMap) {
  EncoderClassifier m(small("bert"), nn::InitOptions{.device = Device::meta()});
  EXPECT_EQ(m.checkpoint_key_to_name("cls.predictions.bias"), "");
  EXPECT_EQ(m.checkpoint_key_to_name("bert.embeddings.position_ids"), "");
  EXPECT_EQ(m.checkpoint_key_to_name("bert.embeddings.LayerNorm.gamma"), "bert.embeddings.LayerNorm.weight");
  EXPECT_EQ(m.checkpoint_key_to_name("encoder.layer.0.output.LayerNorm.beta"), "bert.encoder.layer.0.output.LayerNorm.bias");
  EXPECT_EQ(m.checkpoint_key_to_name("classifier.weight"), "classifier.weight");
  EncoderConfig bb = small("big_bird");
  EncoderClassifier b(bb, nn::InitOptions{.device = Device::meta()});
  EXPECT_EQ(b.checkpoint_key_to_name("bert.pooler.weight"), "");
  EXPECT_EQ(b.checkpoint_key_to_name("encoder.layer.0.attention.self.key.bias"), "bert.encoder.layer.0.attention.self.key.bias");
}

// ---- labelled text ----

struct TempDir {
  std::filesystem::path p;
  TempDir() {
    p = std::filesystem::temp_directory_path() / ("lt-textclasses-" + std::to_string(::getpid()));
    std::filesystem::remove_all(p);
    std::filesystem::create_directories(p);
  }
  ~TempDir() { std::filesystem::remove_all(p); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(p / name) << text;
    return (p / name).string();
  }
};

TEST(TextClasses, JsonlWithNamedLabelsPadsAndSplits) {
  TempDir d;
  std::string lines;
  for (int i = 0; i < 20; ++i) lines += std::string(R"({"text": "t)") + std::to_string(i) + R"(", "label": ")" + (i % 2 ? "pos" : "neg") + "\"}\n";
  const std::string path = d.write("a.jsonl", lines + "\n");
  auto tok = text::byte_tokenizer();
  TextOptions opt;
  opt.val_fraction = 0.2;
  auto data = std::make_shared<const TextClasses>(load_text_classes(path, *tok, 8, opt));
  EXPECT_EQ(data->classes, (std::vector<std::string>{"neg", "pos"}));
  EXPECT_EQ(data->train.size(), 16);
  EXPECT_EQ(data->val.size(), 4);
  SequenceDataset ds(data, false, 4, 0);
  std::vector<int64_t> x(4);
  int64_t y = -1;
  ds.get(0, x.data(), &y);  // "t0", neg
  EXPECT_EQ(x, (std::vector<int64_t>{'t', '0', 0, 0}));
  EXPECT_EQ(y, 0);
}

TEST(TextClasses, DirectoryOfClassFilesAndRefusals) {
  TempDir d;
  std::filesystem::create_directories(d.p / "set");
  std::ofstream(d.p / "set" / "cats.txt") << "meow\n\npurr\nhiss\n";
  std::ofstream(d.p / "set" / "dogs.txt") << "woof\nbark\ngrowl\r\n";
  auto tok = text::byte_tokenizer();
  TextOptions opt;
  opt.val_fraction = 0.34;
  TextClasses c = load_text_classes((d.p / "set").string(), *tok, 3, opt);
  EXPECT_EQ(c.classes, (std::vector<std::string>{"cats", "dogs"}));
  EXPECT_EQ(c.train.size() + c.val.size(), 6);
  EXPECT_EQ(c.truncated, 6);  // every text is longer than 3 bytes
  auto msg = [&](const std::string& text) {
    try {
      load_text_classes(d.write("bad.jsonl", text), *tok, 8, opt);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(msg("{\"text\": \"a\", \"label\": 0}\n{\"text\": \"b\", \"label\": \"x\"}\n").find("bad.jsonl:2"), std::string::npos);
  EXPECT_NE(msg("{\"text\": \"a\"}\n").find("bad.jsonl:1"), std::string::npos);
  EXPECT_NE(msg("not json\n").find("bad.jsonl:1"), std::string::npos);
  EXPECT_NE(msg("{\"text\": \"a\", \"label\": -1}\n").find("label -1"), std::string::npos);
  EXPECT_NE(msg("{\"text\": \"a\", \"label\": 0}\n{\"text\": \"b\", \"label\": 0}\n").find("one class"), std::string::npos);
  // A text holding the pad id is refused by the dataset.
  opt.val_fraction = 0.5;
  auto data = std::make_shared<const TextClasses>(
      load_text_classes(d.write("nul.jsonl", std::string("{\"text\": \"a\\u0001b\", \"label\": 0}\n") +
                                                 std::string(9, ' ') + "\n{\"text\": \"c\", \"label\": 1}\n" +
                                                 "{\"text\": \"d\", \"label\": 0}\n{\"text\": \"e\", \"label\": 1}\n"),
                        *tok, 8, opt));
  EXPECT_THROW(SequenceDataset(data, false, 8, 1), Error);
  EXPECT_NO_THROW(SequenceDataset(data, false, 8, 0));
}

}  // namespace
