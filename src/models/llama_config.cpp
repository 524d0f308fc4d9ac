// LlamaConfig: config.json of model_type llama, qwen2, qwen3 or mistral, read as transformers'
// LlamaConfig / Qwen2Config / Qwen3Config / MistralConfig read it (their defaults for missing keys), the presets,
// the checks and the closed-form size.
#include <cmath>

#include "core/checked_math.h"
#include "models/config_json.h"
#include "models/llama.h"
#include "models/size_limits.h"

namespace lt::models {
using namespace detail;

namespace {

constexpr const char* kTypes = "llama, qwen2, qwen3 or mistral";

bool known_type(const std::string& t) { return t == "llama" || t == "qwen2" || t == "qwen3" || t == "mistral"; }

std::string what(const LlamaConfig& c) { return c.class_prefix() + " config"; }

// Required number in a rope_scaling object.
double scaling_number(const nlohmann::json& s, const char* key, const std::string& type) {
  auto it = s.find(key);
  LT_CHECK(it != s.end() && it->is_number(),
           std::string("config.json: rope_scaling of type '") + type + "' " +
               (it == s.end() ? std::string("has no '") + key + "'" : std::string("'") + key + "' is " + it->dump()),
           std::string("transformers requires '") + key + "' (a number) for this type", "add it to rope_scaling");
  return it->get<double>();
}

// The sliding window: mistral's sliding_window (a missing key is transformers' 4096, null none);
// qwen2 / qwen3's sliding_window, use_sliding_window, max_window_layers and layer_types.
void read_sliding_window(const nlohmann::json& j, LlamaConfig& c) {
  const bool qwen = c.model_type == "qwen2" || c.model_type == "qwen3";
  if (c.model_type != "mistral" && !qwen) return;
  c.sliding_window = 4096;  // MistralConfig's, Qwen2Config's and Qwen3Config's default
  if (auto it = j.find("sliding_window"); it != j.end()) {
    LT_CHECK(it->is_null() || (it->is_number_integer() && it->get<int64_t>() > 0),
             "config.json: " + c.model_type + " 'sliding_window' is " + it->dump(),
             "it counts the keys each query sees (a positive whole number), or null for full attention",
             "fix the config");
    c.sliding_window = it->is_null() ? 0 : it->get<int64_t>();
  }
  if (!qwen) return;
  read_bool(j, "use_sliding_window", c.use_sliding_window);
  read_int(j, "max_window_layers", c.max_window_layers);
  if (auto it = j.find("layer_types"); it != j.end() && !it->is_null()) {
    LT_CHECK(it->is_array(), "config.json: 'layer_types' must be a list", "found " + it->dump(),
             "write e.g. [\"full_attention\", ...]");
    c.layer_sliding.clear();
    for (const auto& e : *it) {
      LT_CHECK(e == "sliding_attention" || e == "full_attention", "config.json: layer_types entry " + e.dump(),
               c.model_type + " layers are \"sliding_attention\" or \"full_attention\"", "fix layer_types");
      c.layer_sliding.push_back(e == "sliding_attention");
    }
  }
}

}  // namespace

// rope_scaling (transformers 4) or rope_parameters (transformers 5, which also holds rope_theta).
void read_rope_object(const nlohmann::json& s, const std::string& key, double& theta, RopeScaling& scaling) {
  if (s.is_null()) return;
  LT_CHECK(s.is_object(), "config.json: '" + key + "' must be an object or null", "found " + s.dump(),
           "write e.g. {\"rope_type\": \"llama3\", ...} or null");
  if (auto t = s.find("rope_theta"); t != s.end() && !t->is_null()) {
    LT_CHECK(t->is_number(), "config.json: " + key + ".rope_theta must be a number", "found " + t->dump(),
             "write a number");
    theta = t->get<double>();
  }
  std::string type = "default";  // transformers: "rope_type", else the older "type", else default
  auto it = s.find("rope_type");
  if (it == s.end() || it->is_null()) it = s.find("type");
  if (it != s.end() && !it->is_null()) {
    LT_CHECK(it->is_string(), "config.json: " + key + "'s rope type must be a string", "found " + it->dump(),
             "write e.g. \"llama3\"");
    type = it->get<std::string>();
  }
  scaling = RopeScaling{};
  if (type == "default") return;
  LT_CHECK(type == "linear" || type == "llama3",
           "config.json: " + key + " type '" + type + "' is not supported",
           "leantrain computes the default, linear and llama3 RoPE frequencies",
           "use a checkpoint whose rope_scaling is null, linear or llama3");
  scaling.type = type;
  scaling.factor = scaling_number(s, "factor", type);
  if (type == "llama3") {
    scaling.low_freq_factor = scaling_number(s, "low_freq_factor", type);
    scaling.high_freq_factor = scaling_number(s, "high_freq_factor", type);
    const double orig = scaling_number(s, "original_max_position_embeddings", type);
    LT_CHECK(orig == std::floor(orig) && orig > 0 && orig < 9.0e15,
             "config.json: rope_scaling.original_max_position_embeddings = " + s["original_max_position_embeddings"].dump(),
             "it counts positions: a positive whole number", "fix the config");
    scaling.original_max_position_embeddings = int64_t(orig);
  }
}

LlamaConfig LlamaConfig::defaults(const std::string& type) {
  LlamaConfig c;  // LlamaConfig's defaults
  c.model_type = type;
  if (type == "llama") return c;
  if (type == "qwen2") {
    c.vocab_size = 151936;
    c.intermediate_size = 22016;
    c.num_key_value_heads = 32;
    c.max_position_embeddings = 32768;
    return c;
  }
  if (type == "qwen3") {  // Qwen3Config's defaults
    c.vocab_size = 151936;
    c.intermediate_size = 22016;
    c.num_key_value_heads = 32;
    c.head_dim = 128;
    c.max_position_embeddings = 32768;
    return c;
  }
  if (type == "mistral") {
    c.intermediate_size = 14336;
    c.num_key_value_heads = 8;
    c.max_position_embeddings = 4096 * 32;
    return c;
  }
  fail("model_type '" + type + "' is not a LLaMA-family type", std::string("this parser reads ") + kTypes + " configs",
       "build it through the model registry (models::config_from_json)");
}

std::vector<std::string> LlamaConfig::preset_names() {
  return {"llama-tiny", "smollm2-135m", "tinyllama-1.1b", "llama3.2-1b", "llama3-8b", "qwen2-0.5b",
          "qwen3-tiny", "qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-8b"};
}

LlamaConfig LlamaConfig::preset(const std::string& name) {
  auto shape = [](LlamaConfig c, int64_t hidden, int64_t inter, int64_t layers, int64_t heads, int64_t kv,
                  int64_t vocab, int64_t positions, double theta, double eps, bool tied) {
    c.hidden_size = hidden, c.intermediate_size = inter, c.num_hidden_layers = layers;
    c.num_attention_heads = heads, c.num_key_value_heads = kv, c.vocab_size = vocab;
    c.max_position_embeddings = positions, c.rope_theta = theta, c.rms_norm_eps = eps, c.tie_word_embeddings = tied;
    return c;
  };
  auto tokens = [](LlamaConfig c, nlohmann::json bos, nlohmann::json eos) {
    c.kept = {{"bos_token_id", bos}, {"eos_token_id", eos}, {"torch_dtype", "bfloat16"}};
    return c;
  };
  const LlamaConfig llama = defaults("llama");
  // A CPU-sized model: 2 layers of width 64, grouped queries (4 heads, 2 key/value heads).
  if (name == "llama-tiny") return shape(llama, 64, 176, 2, 4, 2, 4096, 1024, 10000, 1e-5, true);
  if (name == "smollm2-135m")
    return tokens(shape(llama, 576, 1536, 30, 9, 3, 49152, 8192, 100000, 1e-5, true), 0, 0);
  if (name == "tinyllama-1.1b")
    return tokens(shape(llama, 2048, 5632, 22, 32, 4, 32000, 2048, 10000, 1e-5, false), 1, 2);
  if (name == "llama3.2-1b") {
    LlamaConfig c = tokens(shape(llama, 2048, 8192, 16, 32, 8, 128256, 131072, 500000, 1e-5, true), 128000, 128001);
    c.rope_scaling = RopeScaling{"llama3", 32.0, 1.0, 4.0, 8192};
    return c;
  }
  if (name == "llama3-8b")
    return tokens(shape(llama, 4096, 14336, 32, 32, 8, 128256, 8192, 500000, 1e-5, false), 128000, 128001);
  if (name == "qwen2-0.5b")
    return tokens(shape(defaults("qwen2"), 896, 4864, 24, 14, 2, 151936, 32768, 1000000, 1e-6, true), 151643, 151643);
  // Qwen3 (the Qwen/Qwen3-* config.json files): head_dim 128 whatever the width, RoPE base 1e6,
  // eos <|im_end|>; tied but for 8B.
  const LlamaConfig qwen3 = defaults("qwen3");
  auto q3 = [&](int64_t hidden, int64_t inter, int64_t layers, int64_t heads, bool tied) {
    LlamaConfig c = tokens(shape(qwen3, hidden, inter, layers, heads, 8, 151936, 40960, 1000000, 1e-6, tied), 151643,
                           151645);
    c.head_dim = 128;
    return c;
  };
  // CPU-sized: head_dim 12 over width 32 (q is 48 wide), 4 heads on 2 key/value heads.
  if (name == "qwen3-tiny") {
    LlamaConfig c = shape(qwen3, 32, 64, 2, 4, 2, 4096, 1024, 1000000, 1e-6, true);
    c.head_dim = 12;
    return c;
  }
  if (name == "qwen3-0.6b") return q3(1024, 3072, 28, 16, true);
  if (name == "qwen3-1.7b") return q3(2048, 6144, 28, 16, true);
  if (name == "qwen3-4b") return q3(2560, 9728, 36, 32, true);
  if (name == "qwen3-8b") return q3(4096, 12288, 36, 32, false);
  std::string known;
  for (const std::string& p : preset_names()) known += (known.empty() ? "" : ", ") + p;
  fail("unknown LLaMA-family preset '" + name + "'", "known: " + known, "use one of those or a config.json");
}

LlamaConfig LlamaConfig::from_json(const nlohmann::json& j) {
  std::string type;
  read_string(j, "model_type", type);
  LT_CHECK(known_type(type), "config.json: model_type '" + type + "'",
           std::string("this parser reads ") + kTypes + " configs",
           "build it through the model registry (models::config_from_json)");
  LlamaConfig c = defaults(type);
  read_int(j, "vocab_size", c.vocab_size);
  read_int(j, "hidden_size", c.hidden_size);
  read_int(j, "intermediate_size", c.intermediate_size);
  read_int(j, "num_hidden_layers", c.num_hidden_layers);
  read_int(j, "num_attention_heads", c.num_attention_heads);
  read_int(j, "num_key_value_heads", c.num_key_value_heads);
  read_int(j, "head_dim", c.head_dim);
  read_int(j, "max_position_embeddings", c.max_position_embeddings);
  read_double(j, "rms_norm_eps", c.rms_norm_eps);
  read_double(j, "rope_theta", c.rope_theta);
  read_double(j, "initializer_range", c.initializer_range);
  read_bool(j, "tie_word_embeddings", c.tie_word_embeddings);
  read_string(j, "hidden_act", c.hidden_act);
  if (c.reads_attention_bias()) read_bool(j, "attention_bias", c.attention_bias);
  if (type == "llama") read_bool(j, "mlp_bias", c.mlp_bias);
  double attention_dropout = 0;
  read_double(j, "attention_dropout", attention_dropout);
  LT_CHECK(attention_dropout == 0, "config.json: attention_dropout = " + std::to_string(attention_dropout),
           "leantrain's attention has no probability dropout", "set \"attention_dropout\": 0.0");
  if (auto it = j.find("rope_scaling"); it != j.end()) read_rope_object(*it, "rope_scaling", c.rope_theta, c.rope_scaling);
  if (auto it = j.find("rope_parameters"); it != j.end())
    read_rope_object(*it, "rope_parameters", c.rope_theta, c.rope_scaling);
  read_sliding_window(j, c);
  for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id", "torch_dtype", "dtype"})
    if (auto it = j.find(key); it != j.end()) c.kept[key] = *it;
  check_special_ids(nlohmann::json(c.kept), c.vocab_size);  // what to_json writes, defaults included
  c.validate();
  return c;
}

std::string LlamaConfig::to_json() const {
  nlohmann::json j = {{"model_type", model_type},
                      {"architectures", {class_prefix() + "ForCausalLM"}},
                      {"vocab_size", vocab_size},
                      {"hidden_size", hidden_size},
                      {"intermediate_size", intermediate_size},
                      {"num_hidden_layers", num_hidden_layers},
                      {"num_attention_heads", num_attention_heads},
                      {"num_key_value_heads", kv_heads()},
                      {"head_dim", head_size()},
                      {"max_position_embeddings", max_position_embeddings},
                      {"rms_norm_eps", rms_norm_eps},
                      {"rope_theta", rope_theta},
                      {"hidden_act", hidden_act},
                      {"initializer_range", initializer_range},
                      {"attention_dropout", 0.0},
                      {"tie_word_embeddings", tie_word_embeddings}};
  if (rope_scaling.type.empty()) {
    j["rope_scaling"] = nullptr;
  } else {
    nlohmann::json s = {{"rope_type", rope_scaling.type}, {"factor", rope_scaling.factor}};
    if (rope_scaling.type == "llama3") {
      s["low_freq_factor"] = rope_scaling.low_freq_factor;
      s["high_freq_factor"] = rope_scaling.high_freq_factor;
      s["original_max_position_embeddings"] = rope_scaling.original_max_position_embeddings;
    }
    j["rope_scaling"] = s;
  }
  if (reads_attention_bias()) j["attention_bias"] = attention_bias;
  if (model_type == "llama") j["mlp_bias"] = mlp_bias;
  if (model_type == "mistral" || model_type == "qwen2" || model_type == "qwen3")
    j["sliding_window"] = sliding_window > 0 ? nlohmann::json(sliding_window) : nlohmann::json(nullptr);
  if (model_type == "qwen2" || model_type == "qwen3") {
    j["use_sliding_window"] = use_sliding_window;
    j["max_window_layers"] = max_window_layers;
    if (!layer_sliding.empty()) {
      nlohmann::json t = nlohmann::json::array();
      for (bool b : layer_sliding) t.push_back(b ? "sliding_attention" : "full_attention");
      j["layer_types"] = t;
    }
  }
  for (auto& [k, v] : kept.items()) j[k] = v;
  return j.dump(2);
}

std::string LlamaConfig::class_prefix() const {
  if (model_type == "qwen2") return "Qwen2";
  if (model_type == "qwen3") return "Qwen3";
  if (model_type == "mistral") return "Mistral";
  return "Llama";
}

int64_t LlamaConfig::window_of(int64_t layer) const {
  if (sliding_window <= 0) return 0;
  if (model_type == "mistral") return sliding_window;
  if (model_type != "qwen2" && model_type != "qwen3") return 0;
  if (!use_sliding_window) return 0;
  const bool slides = layer_sliding.empty() ? layer >= max_window_layers : bool(layer_sliding[size_t(layer)]);
  return slides ? sliding_window : 0;
}

int64_t LlamaConfig::head_size() const {
  if (head_dim > 0) return head_dim;
  return num_attention_heads > 0 ? hidden_size / num_attention_heads : 0;
}

double LlamaConfig::num_parameters() const {
  const double V = double(vocab_size), C = double(hidden_size), F = double(intermediate_size);
  const double L = double(num_hidden_layers), H = double(num_attention_heads), K = double(kv_heads());
  const double D = double(head_size());
  // Per layer: q, k, v, o projections (and biases), q and k norms (qwen3), gate, up, down (and
  // biases), two RMSNorms.
  const double attention = 2 * C * H * D + 2 * C * K * D + (qkv_bias() ? H * D + 2 * K * D : 0) + (o_bias() ? C : 0) +
                           (qk_norm() ? 2 * D : 0);
  const double mlp = 3 * C * F + (gated_bias() ? 2 * F + C : 0);
  return V * C + L * (attention + mlp + 2 * C) + C + (tie_word_embeddings ? 0 : V * C);
}

void LlamaConfig::validate() const {
  LT_CHECK(known_type(model_type),
           "LLaMA-family config: model_type '" + model_type + "'", std::string("the family reads ") + kTypes,
           "use one of those");
  const std::string m = what(*this);
  for (auto [key, v] : {std::pair{"vocab_size", vocab_size}, {"hidden_size", hidden_size},
                        {"intermediate_size", intermediate_size}, {"num_hidden_layers", num_hidden_layers},
                        {"num_attention_heads", num_attention_heads},
                        {"max_position_embeddings", max_position_embeddings}})
    check_positive(m.c_str(), key, v);
  LT_CHECK(num_key_value_heads >= 0 && head_dim >= 0,
           m + ": num_key_value_heads = " + std::to_string(num_key_value_heads) + ", head_dim = " + std::to_string(head_dim),
           "each must be positive or absent", "fix the config");
  LT_CHECK(head_dim > 0 || hidden_size % num_attention_heads == 0,
           m + ": hidden_size " + std::to_string(hidden_size) + " is not divisible by num_attention_heads " +
               std::to_string(num_attention_heads),
           "without head_dim each head gets hidden_size / num_attention_heads channels",
           "choose num_attention_heads dividing hidden_size, or give head_dim");
  LT_CHECK(num_attention_heads % kv_heads() == 0,
           m + ": num_attention_heads " + std::to_string(num_attention_heads) + " is not divisible by num_key_value_heads " +
               std::to_string(kv_heads()),
           "each key/value head serves an equal group of query heads", "choose num_key_value_heads dividing it");
  const int64_t d = head_size();
  LT_CHECK(d % 2 == 0 && d <= kRopeMaxHeadDim, m + ": head dim " + std::to_string(d),
           "RoPE rotates pairs of channels (an even head dim), and its kernels take at most " +
               std::to_string(kRopeMaxHeadDim),
           "use an even head_dim of at most " + std::to_string(kRopeMaxHeadDim));
  LT_CHECK(rms_norm_eps > 0 && std::isfinite(rms_norm_eps), m + ": rms_norm_eps = " + std::to_string(rms_norm_eps),
           "it must be positive", "use e.g. 1e-5");
  LT_CHECK(rope_theta > 0 && std::isfinite(rope_theta), m + ": rope_theta = " + std::to_string(rope_theta),
           "the RoPE base must be positive", "use e.g. 10000");
  LT_CHECK(max_window_layers >= 0, m + ": max_window_layers = " + std::to_string(max_window_layers),
           "it counts layers", "use a count of at least 0");
  LT_CHECK(sliding_window >= 0, m + ": sliding_window = " + std::to_string(sliding_window),
           "it counts keys (0: full attention)", "use a positive window or null");
  LT_CHECK(layer_sliding.empty() || int64_t(layer_sliding.size()) == num_hidden_layers,
           m + ": layer_types has " + std::to_string(layer_sliding.size()) + " entries for " +
               std::to_string(num_hidden_layers) + " layers",
           "it names each layer's attention", "give one entry per layer");
  LT_CHECK(initializer_range >= 0 && std::isfinite(initializer_range),
           m + ": initializer_range = " + std::to_string(initializer_range), "it is a standard deviation",
           "use e.g. 0.02");
  LT_CHECK(hidden_act == "silu", m + ": hidden_act '" + hidden_act + "' is not supported",
           "the LLaMA-family MLP is SwiGLU (silu)", "set hidden_act to \"silu\"");
  const RopeScaling& s = rope_scaling;
  LT_CHECK(s.type.empty() || s.type == "linear" || s.type == "llama3",
           m + ": rope_scaling type '" + s.type + "' is not supported",
           "leantrain computes the default, linear and llama3 RoPE frequencies", "use null, linear or llama3");
  if (!s.type.empty())
    LT_CHECK(s.factor > 0 && std::isfinite(s.factor), m + ": rope_scaling.factor = " + std::to_string(s.factor),
             "it divides the frequencies", "use a positive factor");
  if (s.type == "llama3")
    LT_CHECK(s.low_freq_factor > 0 && s.high_freq_factor > s.low_freq_factor && s.original_max_position_embeddings > 0,
             m + ": rope_scaling low_freq_factor " + std::to_string(s.low_freq_factor) + ", high_freq_factor " +
                 std::to_string(s.high_freq_factor) + ", original_max_position_embeddings " +
                 std::to_string(s.original_max_position_embeddings),
             "llama3 scaling needs 0 < low_freq_factor < high_freq_factor and a positive original length",
             "fix rope_scaling");
  check_model_size(class_prefix(), {num_parameters(), num_hidden_layers}, "num_hidden_layers",
                   "hidden_size, intermediate_size, num_hidden_layers, head_dim or vocab_size");
  // Fits, given the size check (each is at most the parameters of one projection); checked all the same.
  (void)checked_mul(checked_add(num_attention_heads, 2 * kv_heads(), m + " q, k, v heads"), d,
                    m + " q | k | v projection width");
}

}  // namespace lt::models
