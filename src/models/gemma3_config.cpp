// Gemma3Config: config.json of model_type gemma3_text (or a gemma3 checkpoint's text_config),
// read as transformers' Gemma3TextConfig reads it (its defaults for missing keys), the presets,
// the checks and the closed-form size.
#include <cmath>

#include "models/config_json.h"
#include "models/gemma3.h"
#include "models/size_limits.h"

namespace lt::models {
using namespace detail;

namespace {

const char* kWhat = "Gemma3 config";

// layer_types: "sliding_attention" / "full_attention", one per layer; true for a sliding layer.
std::vector<bool> read_sliding_layers(const nlohmann::json& t) {
  return read_layer_kinds(t, {"sliding_attention"}, {"full_attention"},
                          "Gemma 3 layers are \"sliding_attention\" or \"full_attention\"",
                          "[\"sliding_attention\", ..., \"full_attention\"]");
}

// transformers 5's rope_parameters: one object per layer type, or one for every layer.
void read_rope_parameters(const nlohmann::json& r, Gemma3Config& c) {
  if (r.is_null()) return;
  LT_CHECK(r.is_object(), "config.json: 'rope_parameters' must be an object", "found " + r.dump(),
           "write {\"full_attention\": {...}, \"sliding_attention\": {...}}");
  if (!r.contains("full_attention") && !r.contains("sliding_attention")) {
    read_rope_object(r, "rope_parameters", c.rope_theta, c.rope_scaling);
    return;
  }
  if (auto it = r.find("full_attention"); it != r.end())
    read_rope_object(*it, "rope_parameters.full_attention", c.rope_theta, c.rope_scaling);
  if (auto it = r.find("sliding_attention"); it != r.end()) {
    RopeScaling local;
    read_rope_object(*it, "rope_parameters.sliding_attention", c.rope_local_base_freq, local);
    LT_CHECK(local.type.empty(), "config.json: rope_parameters.sliding_attention has rope_type '" + local.type + "'",
             "Gemma 3's sliding layers turn by the default frequencies of their own base",
             "use {\"rope_type\": \"default\", \"rope_theta\": ...}");
  }
}

// A softcap: null or absent (none), else a positive number.
double read_softcap(const nlohmann::json& j, const char* key) {
  double v = 0;
  read_double(j, key, v);
  LT_CHECK(v >= 0 && std::isfinite(v), std::string("config.json: '") + key + "' = " + std::to_string(v),
           "a soft cap is a positive number (or null: none)", "fix the config");
  return v;
}

}  // namespace

std::vector<std::string> Gemma3Config::preset_names() { return {"gemma3-tiny", "gemma3-270m", "gemma3-1b", "gemma3-4b"}; }

Gemma3Config Gemma3Config::preset(const std::string& name) {
  auto shape = [](int64_t vocab, int64_t hidden, int64_t inter, int64_t layers, int64_t heads, int64_t kv,
                  int64_t window, int64_t positions) {
    Gemma3Config c;
    c.vocab_size = vocab, c.hidden_size = hidden, c.intermediate_size = inter, c.num_hidden_layers = layers;
    c.num_attention_heads = heads, c.num_key_value_heads = kv, c.sliding_window = window;
    c.max_position_embeddings = positions;
    c.kept = {{"bos_token_id", 2}, {"eos_token_id", 1}, {"pad_token_id", 0}, {"torch_dtype", "bfloat16"}};
    return c;
  };
  // CPU-sized: 3 layers (sliding, sliding, full), 2 heads of 16 on 1 key/value head, window 16.
  if (name == "gemma3-tiny") {
    Gemma3Config c = shape(4096, 32, 64, 3, 2, 1, 16, 1024);
    c.head_dim = 16, c.query_pre_attn_scalar = 16, c.sliding_window_pattern = 3;
    c.kept = nlohmann::json::object();
    return c;
  }
  // google/gemma-3-270m, gemma-3-1b-pt: 256-wide heads, window 512, 32k positions.
  if (name == "gemma3-270m") return shape(262144, 640, 2048, 18, 4, 1, 512, 32768);
  if (name == "gemma3-1b") return shape(262144, 1152, 6912, 26, 4, 1, 512, 32768);
  // google/gemma-3-4b-pt's text_config: Gemma3TextConfig's defaults (8 heads on 4, 262,208 ids:
  // the multimodal vocabulary) but for these, and linear RoPE scaling 8 on the full layers.
  if (name == "gemma3-4b") {
    Gemma3Config c = shape(262208, 2560, 10240, 34, 8, 4, 1024, 131072);
    c.rope_scaling = RopeScaling{.type = "linear", .factor = 8.0};
    return c;
  }
  std::string known;
  for (const std::string& p : preset_names()) known += (known.empty() ? "" : ", ") + p;
  fail("unknown Gemma 3 preset '" + name + "'", "known: " + known, "use one of those or a config.json");
}

Gemma3Config Gemma3Config::from_json(const nlohmann::json& top) {
  std::string type;
  read_string(top, "model_type", type);
  LT_CHECK(type == "gemma3_text" || type == "gemma3", "config.json: model_type '" + type + "'",
           "this parser reads gemma3_text and gemma3 configs",
           "build it through the model registry (models::config_from_json)");
  Gemma3Config c;
  const nlohmann::json* jp = &top;
  nlohmann::json empty = nlohmann::json::object();
  if (type == "gemma3") {  // Gemma3Config: the text tower's fields under text_config (absent: the defaults)
    auto it = top.find("text_config");
    LT_CHECK(it == top.end() || it->is_null() || it->is_object(), "config.json: gemma3 'text_config' is " +
                 (it == top.end() ? std::string("absent") : it->dump()),
             "it holds the text decoder's fields", "write an object");
    jp = (it == top.end() || it->is_null()) ? &empty : &*it;
  }
  const nlohmann::json& j = *jp;
  read_int(j, "vocab_size", c.vocab_size);
  read_int(j, "hidden_size", c.hidden_size);
  read_int(j, "intermediate_size", c.intermediate_size);
  read_int(j, "num_hidden_layers", c.num_hidden_layers);
  read_int(j, "num_attention_heads", c.num_attention_heads);
  read_int(j, "num_key_value_heads", c.num_key_value_heads);
  read_int(j, "head_dim", c.head_dim);
  read_int(j, "max_position_embeddings", c.max_position_embeddings);
  read_double(j, "rms_norm_eps", c.rms_norm_eps);
  read_double(j, "initializer_range", c.initializer_range);
  read_double(j, "query_pre_attn_scalar", c.query_pre_attn_scalar);
  read_double(j, "rope_theta", c.rope_theta);
  read_double(j, "rope_local_base_freq", c.rope_local_base_freq);
  read_bool(j, "tie_word_embeddings", c.tie_word_embeddings);
  if (auto it = j.find("sliding_window"); it != j.end()) {
    LT_CHECK(it->is_number_integer(), "config.json: gemma3 'sliding_window' is " + it->dump(),
             "every Gemma 3 sliding layer needs a window (a whole number of keys)", "set it, e.g. 512");
    read_int(j, "sliding_window", c.sliding_window);
  }
  if (auto it = j.find("sliding_window_pattern"); it != j.end()) read_int(j, "sliding_window_pattern", c.sliding_window_pattern);
  else if (auto it2 = j.find("_sliding_window_pattern"); it2 != j.end()) read_int(j, "_sliding_window_pattern", c.sliding_window_pattern);
  if (auto it = j.find("layer_types"); it != j.end() && !it->is_null()) c.sliding = read_sliding_layers(*it);
  if (auto it = j.find("rope_scaling"); it != j.end()) read_rope_object(*it, "rope_scaling", c.rope_theta, c.rope_scaling);
  if (auto it = j.find("rope_parameters"); it != j.end()) read_rope_parameters(*it, c);
  std::string act = "gelu_pytorch_tanh";
  read_string(j, "hidden_activation", act);
  LT_CHECK(act == "gelu_pytorch_tanh", "config.json: gemma3 hidden_activation '" + act + "' is not supported",
           "leantrain's Gemma 3 MLP is GeGLU with the tanh GELU", "set \"hidden_activation\": \"gelu_pytorch_tanh\"");
  bool bias = false, bidirectional = false;
  read_bool(j, "attention_bias", bias);
  LT_CHECK(!bias, "config.json: gemma3 'attention_bias' is true", "leantrain's Gemma 3 projections have no biases",
           "use a checkpoint with \"attention_bias\": false");
  read_bool(j, "use_bidirectional_attention", bidirectional);
  LT_CHECK(!bidirectional, "config.json: gemma3 'use_bidirectional_attention' is true",
           "leantrain's Gemma 3 is a causal language model", "use a causal checkpoint");
  double attention_dropout = 0;
  read_double(j, "attention_dropout", attention_dropout);
  LT_CHECK(attention_dropout == 0, "config.json: attention_dropout = " + std::to_string(attention_dropout),
           "leantrain's attention has no probability dropout", "set \"attention_dropout\": 0.0");
  LT_CHECK(read_softcap(j, "attn_logit_softcapping") == 0, "config.json: gemma3 'attn_logit_softcapping' is set",
           "leantrain's attention kernels do not soft-cap the scores (Gemma 3's configs leave it null)",
           "set \"attn_logit_softcapping\": null");
  c.final_logit_softcapping = read_softcap(j, "final_logit_softcapping");
  // Token ids and the dtype live at the top of a gemma3 config, in the text config of gemma3_text.
  for (const nlohmann::json* src : {&top, &j})
    for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id", "torch_dtype", "dtype"})
      if (auto it = src->find(key); it != src->end()) c.kept[key] = *it;
  check_special_ids(nlohmann::json(c.kept), c.vocab_size);
  c.validate();
  return c;
}

std::string Gemma3Config::to_json() const {
  nlohmann::json layer_types = nlohmann::json::array();
  for (int64_t i = 0; i < num_hidden_layers; ++i) layer_types.push_back(is_sliding(i) ? "sliding_attention" : "full_attention");
  nlohmann::json j = {{"model_type", "gemma3_text"},
                      {"architectures", {"Gemma3ForCausalLM"}},
                      {"vocab_size", vocab_size},
                      {"hidden_size", hidden_size},
                      {"intermediate_size", intermediate_size},
                      {"num_hidden_layers", num_hidden_layers},
                      {"num_attention_heads", num_attention_heads},
                      {"num_key_value_heads", num_key_value_heads},
                      {"head_dim", head_dim},
                      {"max_position_embeddings", max_position_embeddings},
                      {"rms_norm_eps", rms_norm_eps},
                      {"initializer_range", initializer_range},
                      {"query_pre_attn_scalar", query_pre_attn_scalar},
                      {"rope_theta", rope_theta},
                      {"rope_local_base_freq", rope_local_base_freq},
                      {"sliding_window", sliding_window},
                      {"layer_types", layer_types},
                      {"hidden_activation", "gelu_pytorch_tanh"},
                      {"attention_bias", false},
                      {"attention_dropout", 0.0},
                      {"attn_logit_softcapping", nullptr},
                      {"tie_word_embeddings", tie_word_embeddings}};
  j["final_logit_softcapping"] = final_logit_softcapping > 0 ? nlohmann::json(final_logit_softcapping) : nlohmann::json(nullptr);
  if (rope_scaling.type.empty()) j["rope_scaling"] = nullptr;
  else j["rope_scaling"] = {{"rope_type", rope_scaling.type}, {"factor", rope_scaling.factor}};
  for (auto& [k, v] : kept.items()) j[k] = v;
  return j.dump(2);
}

bool Gemma3Config::is_sliding(int64_t layer) const {
  if (!sliding.empty()) return sliding[size_t(layer)];
  return (layer + 1) % sliding_window_pattern != 0;
}

double Gemma3Config::num_parameters() const {
  const double V = double(vocab_size), C = double(hidden_size), F = double(intermediate_size);
  const double L = double(num_hidden_layers), H = double(num_attention_heads), K = double(num_key_value_heads);
  const double D = double(head_dim);
  // Per layer: q, k, v, o; q and k norms; gate, up, down; four norms.
  const double layer = 2 * C * H * D + 2 * C * K * D + 2 * D + 3 * C * F + 4 * C;
  return V * C + L * layer + C + (tie_word_embeddings ? 0 : V * C);
}

void Gemma3Config::validate() const {
  const std::string m = kWhat;
  for (auto [key, v] : {std::pair{"vocab_size", vocab_size}, {"hidden_size", hidden_size},
                        {"intermediate_size", intermediate_size}, {"num_hidden_layers", num_hidden_layers},
                        {"num_attention_heads", num_attention_heads}, {"num_key_value_heads", num_key_value_heads},
                        {"head_dim", head_dim}, {"max_position_embeddings", max_position_embeddings},
                        {"sliding_window", sliding_window}, {"sliding_window_pattern", sliding_window_pattern}})
    check_positive(m.c_str(), key, v);
  LT_CHECK(num_attention_heads % num_key_value_heads == 0,
           m + ": num_attention_heads " + std::to_string(num_attention_heads) +
               " is not divisible by num_key_value_heads " + std::to_string(num_key_value_heads),
           "each key/value head serves an equal group of query heads", "choose num_key_value_heads dividing it");
  LT_CHECK(head_dim % 2 == 0 && head_dim <= kRopeMaxHeadDim, m + ": head_dim " + std::to_string(head_dim),
           "RoPE rotates pairs of channels (an even head dim), and its kernels take at most " +
               std::to_string(kRopeMaxHeadDim),
           "use an even head_dim of at most " + std::to_string(kRopeMaxHeadDim));
  LT_CHECK(sliding.empty() || int64_t(sliding.size()) == num_hidden_layers,
           m + ": layer_types has " + std::to_string(sliding.size()) + " entries for " +
               std::to_string(num_hidden_layers) + " layers",
           "it names each layer's attention", "give one entry per layer");
  for (auto [key, v] : {std::pair{"rms_norm_eps", rms_norm_eps}, {"rope_theta", rope_theta},
                        {"rope_local_base_freq", rope_local_base_freq}, {"query_pre_attn_scalar", query_pre_attn_scalar}})
    LT_CHECK(v > 0 && std::isfinite(v), m + ": " + key + " = " + std::to_string(v), "it must be positive",
             "fix the config");
  LT_CHECK(initializer_range >= 0 && std::isfinite(initializer_range),
           m + ": initializer_range = " + std::to_string(initializer_range), "it is a standard deviation", "use e.g. 0.02");
  LT_CHECK(final_logit_softcapping >= 0 && std::isfinite(final_logit_softcapping),
           m + ": final_logit_softcapping = " + std::to_string(final_logit_softcapping),
           "a soft cap is positive (0: none)", "fix the config");
  LT_CHECK(rope_scaling.type.empty() || rope_scaling.type == "linear" || rope_scaling.type == "llama3",
           m + ": rope_scaling type '" + rope_scaling.type + "' is not supported",
           "leantrain computes the default, linear and llama3 RoPE frequencies", "use null, linear or llama3");
  if (!rope_scaling.type.empty())
    LT_CHECK(rope_scaling.factor > 0 && std::isfinite(rope_scaling.factor),
             m + ": rope_scaling.factor = " + std::to_string(rope_scaling.factor), "it divides the frequencies",
             "use a positive factor");
  check_model_size("Gemma3", {num_parameters(), num_hidden_layers}, "num_hidden_layers",
                   "hidden_size, intermediate_size, num_hidden_layers, head_dim or vocab_size");
  (void)padding_idx();
}

// Gemma3TextConfig defaults pad_token_id to 0.
int64_t Gemma3Config::padding_idx() const { return padding_index(kept, vocab_size, 0); }

}  // namespace lt::models
