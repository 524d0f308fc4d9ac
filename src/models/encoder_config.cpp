// EncoderConfig: transformers' BertConfig, RobertaConfig and DistilBertConfig (DistilBERT names
// its fields dim, n_layers, n_heads, hidden_dim, dropout, activation), presets, config.json.
#include <cmath>

#include "leantrain/error.h"
#include "models/config_json.h"
#include "models/encoder.h"
#include "models/size_limits.h"

namespace lt::models {

using namespace detail;

namespace {

constexpr const char* kTypes = "bert, roberta, distilbert and big_bird";

// id2label {"0": "neg", "1": "pos"}: ids 0..n-1, each once, names strings.
std::vector<std::string> read_id2label(const nlohmann::json& j) {
  LT_CHECK(j.is_object(), "config.json: 'id2label' must be an object", "found " + j.dump(),
           "write {\"0\": \"LABEL_0\", ...}");
  std::vector<std::string> names(j.size());
  std::vector<bool> seen(j.size(), false);
  for (auto& [key, value] : j.items()) {
    size_t used = 0;
    long long id = -1;
    try {
      id = std::stoll(key, &used);
    } catch (const std::exception&) {
    }
    LT_CHECK(used == key.size() && id >= 0 && id < (long long)names.size() && !seen[size_t(id)],
             "config.json: id2label has the key '" + key + "'",
             "its keys are the class ids 0.." + std::to_string(names.size() - 1) + ", each once", "fix id2label");
    LT_CHECK(value.is_string(), "config.json: id2label[\"" + key + "\"] is " + value.dump(), "class names are strings",
             "quote the name");
    seen[size_t(id)] = true;
    names[size_t(id)] = value.get<std::string>();
  }
  return names;
}

}  // namespace

EncoderConfig EncoderConfig::defaults(const std::string& type) {
  EncoderConfig c;
  c.model_type = type;
  if (type == "bert") return c;
  if (type == "roberta") {
    c.vocab_size = 50265, c.max_position_embeddings = 514, c.type_vocab_size = 1, c.layer_norm_eps = 1e-5;
    c.pad_token_id = 1;
    c.kept = {{"bos_token_id", 0}, {"eos_token_id", 2}};
    return c;
  }
  if (type == "distilbert") {
    c.num_hidden_layers = 6, c.type_vocab_size = 0, c.classifier_dropout = 0.2;
    return c;
  }
  if (type == "big_bird") {  // transformers' BigBirdConfig (google/bigbird-roberta-base's shape)
    c.vocab_size = 50358, c.max_position_embeddings = 4096, c.hidden_act = "gelu_new";
    c.attention_type = "block_sparse";
    c.kept = {{"bos_token_id", 1}, {"eos_token_id", 2}, {"sep_token_id", 66}};
    return c;
  }
  fail("encoder config: model_type '" + type + "'", std::string("the encoder families are ") + kTypes,
       "use one of those");
}

std::vector<std::string> EncoderConfig::preset_names() {
  return {"bert-tiny",       "bert-base-uncased",       "roberta-tiny", "roberta-base",
          "distilbert-tiny", "distilbert-base-uncased", "bigbird-tiny", "bigbird-roberta-base"};
}

EncoderConfig EncoderConfig::preset(const std::string& name) {
  const std::string type = name.rfind("distilbert", 0) == 0 ? "distilbert"
                           : name.rfind("roberta", 0) == 0  ? "roberta"
                           : name.rfind("bigbird", 0) == 0  ? "big_bird"
                                                            : "bert";
  EncoderConfig c = defaults(type);
  if (name.ends_with("-tiny")) {  // the shape of google/bert_uncased_L-2_H-128_A-2
    c.hidden_size = 128, c.num_hidden_layers = 2, c.num_attention_heads = 2, c.intermediate_size = 512;
    // BigBird's test shape: blocks of 16, one random block, so 128 positions already run block-sparse.
    if (type == "big_bird") c.block_size = 16, c.num_random_blocks = 1, c.max_position_embeddings = 1024;
  } else {
    LT_CHECK(name == "bert-base-uncased" || name == "roberta-base" || name == "distilbert-base-uncased" ||
                 name == "bigbird-roberta-base",
             "unknown encoder preset '" + name + "'", "the presets are bert-tiny, bert-base-uncased, roberta-tiny, "
             "roberta-base, distilbert-tiny, distilbert-base-uncased, bigbird-tiny and bigbird-roberta-base",
             "pass one of those");
  }
  c.validate();
  return c;
}

EncoderConfig EncoderConfig::from_json(const nlohmann::json& j) {
  std::string type;
  read_string(j, "model_type", type);
  LT_CHECK(type == "bert" || type == "roberta" || type == "distilbert" || type == "big_bird",
           "config.json: model_type '" + type + "'",
           std::string("this parser reads ") + kTypes + " configs",
           "build it through the model registry (models::config_from_json)");
  EncoderConfig c = defaults(type);
  read_int(j, "vocab_size", c.vocab_size);
  read_int(j, "max_position_embeddings", c.max_position_embeddings);
  read_int(j, "pad_token_id", c.pad_token_id);
  read_double(j, "initializer_range", c.initializer_range);
  if (c.distil()) {
    read_int(j, "dim", c.hidden_size);
    read_int(j, "n_layers", c.num_hidden_layers);
    read_int(j, "n_heads", c.num_attention_heads);
    read_int(j, "hidden_dim", c.intermediate_size);
    read_double(j, "dropout", c.hidden_dropout_prob);
    read_double(j, "attention_dropout", c.attention_probs_dropout_prob);
    read_double(j, "seq_classif_dropout", c.classifier_dropout);
    read_string(j, "activation", c.hidden_act);
    bool sinusoidal = false;
    read_bool(j, "sinusoidal_pos_embds", sinusoidal);
    LT_CHECK(!sinusoidal, "config.json: sinusoidal_pos_embds is true",
             "leantrain's DistilBERT learns its position embeddings (as every released checkpoint does)",
             "set \"sinusoidal_pos_embds\": false");
    for (const char* key : {"qa_dropout", "tie_weights_"})
      if (auto it = j.find(key); it != j.end()) c.kept[key] = *it;
  } else {
    read_int(j, "hidden_size", c.hidden_size);
    read_int(j, "num_hidden_layers", c.num_hidden_layers);
    read_int(j, "num_attention_heads", c.num_attention_heads);
    read_int(j, "intermediate_size", c.intermediate_size);
    read_int(j, "type_vocab_size", c.type_vocab_size);
    read_double(j, "layer_norm_eps", c.layer_norm_eps);
    read_double(j, "hidden_dropout_prob", c.hidden_dropout_prob);
    read_double(j, "attention_probs_dropout_prob", c.attention_probs_dropout_prob);
    read_double(j, "classifier_dropout", c.classifier_dropout);
    read_string(j, "hidden_act", c.hidden_act);
    std::string positions = "absolute";
    read_string(j, "position_embedding_type", positions);
    LT_CHECK(positions == "absolute", "config.json: position_embedding_type '" + positions + "'",
             "leantrain's encoders have absolute (learned) positions", "set \"position_embedding_type\": \"absolute\"");
    if (c.big_bird()) {
      read_string(j, "attention_type", c.attention_type);
      read_int(j, "block_size", c.block_size);
      read_int(j, "num_random_blocks", c.num_random_blocks);
      read_bool(j, "rescale_embeddings", c.rescale_embeddings);
      bool use_bias = true, is_decoder = false;
      read_bool(j, "use_bias", use_bias);
      read_bool(j, "is_decoder", is_decoder);
      LT_CHECK(use_bias, "config.json: use_bias is false", "leantrain's BigBird has biases on q, k and v (as every "
               "released checkpoint)", "set \"use_bias\": true");
      LT_CHECK(!is_decoder, "config.json: is_decoder is true", "leantrain's BigBird is an encoder (classification)",
               "set \"is_decoder\": false");
    }
  }
  if (auto it = j.find("id2label"); it != j.end() && !it->is_null()) {
    c.labels = read_id2label(*it);
    c.num_labels = int64_t(c.labels.size());
  }
  int64_t n = c.num_labels;
  read_int(j, "num_labels", n);
  LT_CHECK(c.labels.empty() || n == c.num_labels,
           "config.json: num_labels " + std::to_string(n) + " and id2label with " + std::to_string(c.labels.size()) + " names",
           "they must agree", "drop num_labels (id2label decides)");
  c.num_labels = n;
  std::string problem;
  read_string(j, "problem_type", problem);
  LT_CHECK(problem.empty() || problem == "single_label_classification", "config.json: problem_type '" + problem + "'",
           "leantrain trains single-label classifiers (cross-entropy)", "set \"problem_type\": \"single_label_classification\"");
  for (const char* key : {"bos_token_id", "eos_token_id", "sep_token_id", "torch_dtype", "dtype", "architectures"})
    if (auto it = j.find(key); it != j.end()) c.kept[key] = *it;
  c.kept.erase("architectures");  // written from the model this config builds
  // After the merge: a family default (RoBERTa's eos 2) must fit a vocab_size this file shrank.
  check_special_ids(nlohmann::json(c.kept), c.vocab_size);
  c.validate();
  return c;
}

std::string EncoderConfig::to_json() const {
  nlohmann::json j = {{"model_type", model_type},
                      {"architectures", {class_prefix() + "ForSequenceClassification"}},
                      {"vocab_size", vocab_size},
                      {"max_position_embeddings", max_position_embeddings},
                      {"pad_token_id", pad_token_id},
                      {"initializer_range", initializer_range}};
  if (distil()) {
    j["dim"] = hidden_size, j["n_layers"] = num_hidden_layers, j["n_heads"] = num_attention_heads;
    j["hidden_dim"] = intermediate_size, j["dropout"] = hidden_dropout_prob;
    j["attention_dropout"] = attention_probs_dropout_prob, j["activation"] = hidden_act;
    j["seq_classif_dropout"] = classifier_dropout, j["sinusoidal_pos_embds"] = false;
  } else {
    j["hidden_size"] = hidden_size, j["num_hidden_layers"] = num_hidden_layers;
    j["num_attention_heads"] = num_attention_heads, j["intermediate_size"] = intermediate_size;
    j["type_vocab_size"] = type_vocab_size, j["layer_norm_eps"] = layer_norm_eps;
    j["hidden_dropout_prob"] = hidden_dropout_prob, j["attention_probs_dropout_prob"] = attention_probs_dropout_prob;
    j["classifier_dropout"] = classifier_dropout < 0 ? nlohmann::json(nullptr) : nlohmann::json(classifier_dropout);
    j["hidden_act"] = hidden_act, j["position_embedding_type"] = "absolute";
    if (big_bird()) {
      j["attention_type"] = attention_type, j["block_size"] = block_size, j["num_random_blocks"] = num_random_blocks;
      j["rescale_embeddings"] = rescale_embeddings, j["use_bias"] = true, j["is_decoder"] = false;
    }
  }
  if (labels.empty()) {
    // Unnamed classes: transformers derives id2label {i: "LABEL_i"} from num_labels itself, and
    // writing a million generated names here would cost seconds for nothing.
    j["num_labels"] = num_labels;
  } else {
    nlohmann::json id2label = nlohmann::json::object(), label2id = nlohmann::json::object();
    for (size_t i = 0; i < labels.size(); ++i) {
      id2label[std::to_string(i)] = labels[i];
      label2id[labels[i]] = int64_t(i);
    }
    j["id2label"] = id2label;
    // Two classes with one name would make label2id lose one; transformers then derives it itself.
    if (label2id.size() == labels.size()) j["label2id"] = label2id;
  }
  j["problem_type"] = "single_label_classification";
  for (auto& [k, v] : kept.items()) j[k] = v;
  return j.dump(2);
}

double EncoderConfig::head_dropout() const {
  return classifier_dropout >= 0 ? classifier_dropout : hidden_dropout_prob;
}

GeluApprox EncoderConfig::gelu_approx() const {
  return hidden_act == "gelu" ? GeluApprox::Erf : GeluApprox::Tanh;
}

std::string EncoderConfig::class_prefix() const {
  return model_type == "roberta" ? "Roberta" : distil() ? "DistilBert" : big_bird() ? "BigBird" : "Bert";
}

double EncoderConfig::num_parameters() const {
  const double h = double(hidden_size), f = double(intermediate_size), l = double(num_labels);
  const double embeddings = (double(vocab_size) + double(max_position_embeddings) + double(type_vocab_size)) * h + 2 * h;
  const double layer = 4 * (h * h + h) + 2 * (h * f) + f + h + 4 * h;
  const double head = (h * h + h) + (h * l + l);  // pooler / dense / pre_classifier, then the classifier
  return embeddings + double(num_hidden_layers) * layer + head;
}

void EncoderConfig::validate() const {
  const std::string m = class_prefix() + " config";
  const bool d = distil();
  for (auto [key, v] : {std::pair{"vocab_size", vocab_size}, {d ? "dim" : "hidden_size", hidden_size},
                        {d ? "hidden_dim" : "intermediate_size", intermediate_size},
                        {d ? "n_layers" : "num_hidden_layers", num_hidden_layers},
                        {d ? "n_heads" : "num_attention_heads", num_attention_heads},
                        {"max_position_embeddings", max_position_embeddings}, {"num_labels", num_labels}})
    check_positive(m.c_str(), key, v);
  LT_CHECK(hidden_size % num_attention_heads == 0,
           m + ": hidden size " + std::to_string(hidden_size) + " is not divisible by " +
               std::to_string(num_attention_heads) + " heads",
           "each head gets hidden_size / heads channels", "choose a head count that divides the hidden size");
  LT_CHECK(type_vocab_size >= 0 && (!d || type_vocab_size == 0), m + ": type_vocab_size = " + std::to_string(type_vocab_size),
           "it counts token types (0 or more)", "fix the config");
  LT_CHECK(pad_token_id >= 0 && pad_token_id < vocab_size,
           m + ": pad_token_id " + std::to_string(pad_token_id) + " with vocab_size " + std::to_string(vocab_size),
           "padding is a row of the embedding table", "set pad_token_id below vocab_size");
  LT_CHECK(context() >= 1, m + ": max_position_embeddings " + std::to_string(max_position_embeddings),
           "RoBERTa's positions start at pad_token_id + 1 = " + std::to_string(position_offset()) + ", leaving no position",
           "raise max_position_embeddings");
  for (auto [key, v] : {std::pair{"hidden_dropout_prob", hidden_dropout_prob},
                        {"attention_probs_dropout_prob", attention_probs_dropout_prob}})
    LT_CHECK(v >= 0 && v < 1, m + ": " + key + " = " + std::to_string(v), "a dropout probability is in [0, 1)",
             "fix the config");
  LT_CHECK(classifier_dropout < 1 && !std::isnan(classifier_dropout),
           m + ": classifier dropout = " + std::to_string(classifier_dropout), "a dropout probability is in [0, 1)",
           "fix the config");
  LT_CHECK(layer_norm_eps > 0 && std::isfinite(layer_norm_eps), m + ": layer_norm_eps = " + std::to_string(layer_norm_eps),
           "it must be positive", "use e.g. 1e-12");
  LT_CHECK(initializer_range >= 0 && std::isfinite(initializer_range),
           m + ": initializer_range = " + std::to_string(initializer_range), "it is a standard deviation", "use e.g. 0.02");
  LT_CHECK(hidden_act == "gelu" || hidden_act == "gelu_new" || hidden_act == "gelu_pytorch_tanh",
           m + ": hidden_act '" + hidden_act + "' is not supported", "leantrain's encoder MLPs use GELU",
           "use gelu, gelu_new or gelu_pytorch_tanh");
  if (big_bird()) {
    LT_CHECK(attention_type == "block_sparse" || attention_type == "original_full",
             m + ": attention_type '" + attention_type + "'", "BigBird attends block_sparse or original_full",
             "use one of those");
    LT_CHECK(block_size > 0 && block_size <= 4096 && num_random_blocks >= 0 && num_random_blocks <= 64,
             m + ": block_size " + std::to_string(block_size) + ", num_random_blocks " + std::to_string(num_random_blocks),
             "a block holds 1 to 4096 positions and a query block attends to 0 to 64 random blocks", "fix the config");
  }
  LT_CHECK(labels.empty() || int64_t(labels.size()) == num_labels,
           m + ": " + std::to_string(labels.size()) + " class names for " + std::to_string(num_labels) + " classes",
           "id2label names every class", "fix id2label");
  check_class_count(class_prefix(), num_labels);
  check_model_size(class_prefix(), {num_parameters(), num_hidden_layers}, d ? "n_layers" : "num_hidden_layers",
                   "hidden size, intermediate size, layers, max_position_embeddings, num_labels or vocab_size");
}

}  // namespace lt::models
