// Qwen35Config: config.json of model_type qwen3_5_text (or a qwen3_5 checkpoint's text_config),
// read as transformers' Qwen3_5TextConfig reads it (its defaults for missing keys, layer_types or
// full_attention_interval, rope_parameters with partial_rotary_factor, or the older top-level
// rope_theta / partial_rotary_factor), the presets, the checks and the closed-form size.
#include <algorithm>
#include <cmath>

#include "models/config_json.h"
#include "models/qwen3_5.h"
#include "models/size_limits.h"

namespace lt::models {
using namespace detail;

namespace {

const char* kQwen35What = "Qwen3.5 config";

// layer_types: "linear_attention" / "full_attention", one per layer (transformers also remaps the
// older "attention" / "linear" spellings); true for a full-attention layer.
std::vector<bool> read_full_layers(const nlohmann::json& t) {
  return read_layer_kinds(t, {"full_attention", "attention"}, {"linear_attention", "linear"},
                          "Qwen3.5 layers are \"linear_attention\" (Gated DeltaNet) or \"full_attention\"",
                          "[\"linear_attention\", ..., \"full_attention\"]");
}

// rope_parameters (transformers 5) or the older top-level keys: theta, partial_rotary_factor; the
// multimodal keys kept for writing back. Only the default frequencies are computed.
void read_rope(const nlohmann::json& j, Qwen35Config& c) {
  read_double(j, "rope_theta", c.rope_theta);
  read_double(j, "partial_rotary_factor", c.partial_rotary_factor);
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    LT_CHECK(it->is_object(), std::string("config.json: '") + key + "' must be an object", "found " + it->dump(),
             "write {\"rope_type\": \"default\", \"rope_theta\": ..., \"partial_rotary_factor\": 0.25}");
    const nlohmann::json& r = *it;
    read_double(r, "rope_theta", c.rope_theta);
    read_double(r, "partial_rotary_factor", c.partial_rotary_factor);
    std::string type = "default";
    read_string(r, r.contains("rope_type") ? "rope_type" : "type", type);
    LT_CHECK(type == "default", std::string("config.json: ") + key + " rope_type '" + type + "' is not supported",
             "leantrain computes Qwen3.5's default (partial) RoPE; its multimodal sections coincide for text",
             "use a checkpoint whose rope_type is \"default\"");
    for (auto& [k, v] : r.items())
      if (k != "rope_theta" && k != "partial_rotary_factor" && k != "rope_type" && k != "type") c.rope_kept[k] = v;
  }
}

}  // namespace

std::vector<std::string> Qwen35Config::preset_names() {
  return {"qwen3.5-tiny", "qwen3.5-0.8b", "qwen3.5-2b", "qwen3.5-4b", "qwen3.5-9b", "qwen3.5-27b"};
}

Qwen35Config Qwen35Config::preset(const std::string& name) {
  // The published text towers: 262,144 positions, rope_theta 1e7 on 64 of 256 dims, DeltaNet key
  // heads of 128 with a 4-tap convolution, one MTP layer (docs/user-guide.md names the sources).
  auto shape = [](int64_t hidden, int64_t inter, int64_t layers, int64_t heads, int64_t kv, int64_t lin_k,
                  int64_t lin_v, bool tied) {
    Qwen35Config c;
    c.hidden_size = hidden, c.intermediate_size = inter, c.num_hidden_layers = layers;
    c.num_attention_heads = heads, c.num_key_value_heads = kv;
    c.linear_num_key_heads = lin_k, c.linear_num_value_heads = lin_v;
    c.max_position_embeddings = 262144, c.rope_theta = 1e7, c.tie_word_embeddings = tied;
    c.mtp_num_hidden_layers = 1;
    c.rope_kept = {{"mrope_interleaved", true}, {"mrope_section", {11, 11, 10}}};
    c.kept = {{"eos_token_id", 248044}, {"mamba_ssm_dtype", "float32"}, {"mtp_use_dedicated_embeddings", false},
              {"dtype", "bfloat16"}};
    return c;
  };
  // CPU-sized: 4 layers (three DeltaNet, one full attention), DeltaNet 2 key heads of 8 on 4 value
  // heads of 6, attention 2 heads of 16 on 1 key/value head, 8 of 16 dims rotated.
  if (name == "qwen3.5-tiny") {
    Qwen35Config c;
    c.vocab_size = 4096, c.hidden_size = 32, c.intermediate_size = 64, c.num_hidden_layers = 4;
    c.num_attention_heads = 2, c.num_key_value_heads = 1, c.head_dim = 16, c.partial_rotary_factor = 0.5;
    c.linear_num_key_heads = 2, c.linear_key_head_dim = 8, c.linear_num_value_heads = 4, c.linear_value_head_dim = 6;
    c.max_position_embeddings = 1024, c.rope_theta = 1e6, c.tie_word_embeddings = true;
    return c;
  }
  if (name == "qwen3.5-0.8b") return shape(1024, 3584, 24, 8, 2, 16, 16, true);
  if (name == "qwen3.5-2b") return shape(2048, 6144, 24, 8, 2, 16, 16, true);
  if (name == "qwen3.5-4b") return shape(2560, 9216, 32, 16, 4, 16, 32, true);
  if (name == "qwen3.5-9b") return shape(4096, 12288, 32, 16, 4, 16, 32, false);
  if (name == "qwen3.5-27b") return shape(5120, 17408, 64, 24, 4, 16, 48, false);
  std::string known;
  for (const std::string& p : preset_names()) known += (known.empty() ? "" : ", ") + p;
  fail("unknown Qwen3.5 preset '" + name + "'", "known: " + known, "use one of those or a config.json");
}

Qwen35Config Qwen35Config::from_json(const nlohmann::json& top) {
  std::string type;
  read_string(top, "model_type", type);
  LT_CHECK(type == "qwen3_5_text" || type == "qwen3_5", "config.json: model_type '" + type + "'",
           "this parser reads qwen3_5_text and qwen3_5 configs",
           "build it through the model registry (models::config_from_json)");
  Qwen35Config c;
  const nlohmann::json* jp = &top;
  nlohmann::json empty = nlohmann::json::object();
  if (type == "qwen3_5") {  // Qwen3_5Config: the text tower's fields under text_config
    auto it = top.find("text_config");
    LT_CHECK(it == top.end() || it->is_null() || it->is_object(),
             "config.json: qwen3_5 'text_config' is " + (it == top.end() ? std::string("absent") : it->dump()),
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
  read_int(j, "linear_conv_kernel_dim", c.linear_conv_kernel_dim);
  read_int(j, "linear_key_head_dim", c.linear_key_head_dim);
  read_int(j, "linear_value_head_dim", c.linear_value_head_dim);
  read_int(j, "linear_num_key_heads", c.linear_num_key_heads);
  read_int(j, "linear_num_value_heads", c.linear_num_value_heads);
  read_int(j, "full_attention_interval", c.full_attention_interval);
  read_int(j, "mtp_num_hidden_layers", c.mtp_num_hidden_layers);
  read_double(j, "rms_norm_eps", c.rms_norm_eps);
  read_double(j, "initializer_range", c.initializer_range);
  // tie_word_embeddings: the text config's, else a qwen3_5 config's top level.
  read_bool(top, "tie_word_embeddings", c.tie_word_embeddings);
  if (&j != &top) read_bool(j, "tie_word_embeddings", c.tie_word_embeddings);
  read_rope(j, c);
  if (auto it = j.find("layer_types"); it != j.end() && !it->is_null()) c.full = read_full_layers(*it);
  std::string act = "silu";
  read_string(j, "hidden_act", act);
  LT_CHECK(act == "silu", "config.json: qwen3_5 hidden_act '" + act + "' is not supported",
           "leantrain's Qwen3.5 MLP and convolution use SiLU", "set \"hidden_act\": \"silu\"");
  bool bias = false, gate = true;
  read_bool(j, "attention_bias", bias);
  LT_CHECK(!bias, "config.json: qwen3_5 'attention_bias' is true", "leantrain's Qwen3.5 projections have no biases",
           "use a checkpoint with \"attention_bias\": false");
  read_bool(j, "attn_output_gate", gate);
  LT_CHECK(gate, "config.json: qwen3_5 'attn_output_gate' is false",
           "transformers' Qwen3.5 attention always gates its output (q_proj is twice the heads' width)",
           "use a Qwen3.5 checkpoint (attn_output_gate true)");
  double attention_dropout = 0;
  read_double(j, "attention_dropout", attention_dropout);
  LT_CHECK(attention_dropout == 0, "config.json: attention_dropout = " + std::to_string(attention_dropout),
           "leantrain's attention has no probability dropout", "set \"attention_dropout\": 0.0");
  std::string ssm = "float32";
  read_string(j, "mamba_ssm_dtype", ssm);
  LT_CHECK(ssm == "float32" || ssm == "float" || ssm == "auto",
           "config.json: mamba_ssm_dtype '" + ssm + "'",
           "leantrain keeps the Gated DeltaNet state in f32 (its chunk arithmetic is f32)",
           "set \"mamba_ssm_dtype\": \"float32\"");
  // Token ids and the dtype live at the top of a qwen3_5 config, in the text config of qwen3_5_text.
  for (const nlohmann::json* src : {&top, &j})
    for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id", "torch_dtype", "dtype",
                            "mtp_use_dedicated_embeddings", "mamba_ssm_dtype"})
      if (auto it = src->find(key); it != src->end()) c.kept[key] = *it;
  check_special_ids(nlohmann::json(c.kept), c.vocab_size);
  c.validate();
  return c;
}

std::string Qwen35Config::to_json() const {
  nlohmann::json layer_types = nlohmann::json::array();
  for (int64_t i = 0; i < num_hidden_layers; ++i) layer_types.push_back(is_full(i) ? "full_attention" : "linear_attention");
  nlohmann::json rope = {{"rope_type", "default"}, {"rope_theta", rope_theta}, {"partial_rotary_factor", partial_rotary_factor}};
  for (auto& [k, v] : rope_kept.items()) rope[k] = v;
  nlohmann::json j = {{"model_type", "qwen3_5_text"},
                      {"architectures", {"Qwen3_5ForCausalLM"}},
                      {"vocab_size", vocab_size},
                      {"hidden_size", hidden_size},
                      {"intermediate_size", intermediate_size},
                      {"num_hidden_layers", num_hidden_layers},
                      {"num_attention_heads", num_attention_heads},
                      {"num_key_value_heads", num_key_value_heads},
                      {"head_dim", head_dim},
                      {"max_position_embeddings", max_position_embeddings},
                      {"linear_conv_kernel_dim", linear_conv_kernel_dim},
                      {"linear_key_head_dim", linear_key_head_dim},
                      {"linear_value_head_dim", linear_value_head_dim},
                      {"linear_num_key_heads", linear_num_key_heads},
                      {"linear_num_value_heads", linear_num_value_heads},
                      {"full_attention_interval", full_attention_interval},
                      {"layer_types", layer_types},
                      {"mtp_num_hidden_layers", mtp_num_hidden_layers},
                      {"rms_norm_eps", rms_norm_eps},
                      {"initializer_range", initializer_range},
                      {"rope_parameters", rope},
                      {"hidden_act", "silu"},
                      {"attention_bias", false},
                      {"attn_output_gate", true},
                      {"attention_dropout", 0.0},
                      {"tie_word_embeddings", tie_word_embeddings}};
  for (auto& [k, v] : kept.items()) j[k] = v;
  return j.dump(2);
}

bool Qwen35Config::is_full(int64_t layer) const {
  if (!full.empty()) return full[size_t(layer)];
  return (layer + 1) % full_attention_interval == 0;
}

int64_t Qwen35Config::rotary_dim() const { return int64_t(double(head_dim) * partial_rotary_factor); }

double Qwen35Config::num_parameters() const {
  const double V = double(vocab_size), C = double(hidden_size), F = double(intermediate_size);
  const double H = double(num_attention_heads), K = double(num_key_value_heads), D = double(head_dim);
  const double key = double(linear_num_key_heads) * double(linear_key_head_dim);
  const double value = double(linear_num_value_heads) * double(linear_value_head_dim);
  const double hv = double(linear_num_value_heads), conv = 2 * key + value;
  // Per layer: two norms and the MLP; then the mixer.
  const double common = 2 * C + 3 * C * F;
  const double full_mixer = C * 2 * H * D + 2 * C * K * D + H * D * C + 2 * D;
  const double linear_mixer = C * conv + C * value + 2 * C * hv + conv * double(linear_conv_kernel_dim) + 2 * hv +
                              double(linear_value_head_dim) + value * C;
  const double L = double(num_hidden_layers);
  double nfull = 0;
  if (!full.empty())
    for (bool f : full) nfull += f;
  else
    nfull = double(num_hidden_layers / std::max<int64_t>(1, full_attention_interval));
  return V * C + C + (tie_word_embeddings ? 0 : V * C) + L * common + nfull * full_mixer + (L - nfull) * linear_mixer;
}

int64_t Qwen35Config::padding_idx() const { return padding_index(kept, vocab_size, -1); }

void Qwen35Config::validate() const {
  (void)padding_idx();
  const std::string m = kQwen35What;
  for (auto [key, v] : {std::pair{"vocab_size", vocab_size}, {"hidden_size", hidden_size},
                        {"intermediate_size", intermediate_size}, {"num_hidden_layers", num_hidden_layers},
                        {"num_attention_heads", num_attention_heads}, {"num_key_value_heads", num_key_value_heads},
                        {"head_dim", head_dim}, {"max_position_embeddings", max_position_embeddings},
                        {"linear_conv_kernel_dim", linear_conv_kernel_dim}, {"linear_key_head_dim", linear_key_head_dim},
                        {"linear_value_head_dim", linear_value_head_dim}, {"linear_num_key_heads", linear_num_key_heads},
                        {"linear_num_value_heads", linear_num_value_heads},
                        {"full_attention_interval", full_attention_interval}})
    check_positive(m.c_str(), key, v);
  LT_CHECK(mtp_num_hidden_layers >= 0, m + ": mtp_num_hidden_layers = " + std::to_string(mtp_num_hidden_layers),
           "it counts layers", "fix the config");
  LT_CHECK(num_attention_heads % num_key_value_heads == 0,
           m + ": num_attention_heads " + std::to_string(num_attention_heads) +
               " is not divisible by num_key_value_heads " + std::to_string(num_key_value_heads),
           "each key/value head serves an equal group of query heads", "choose num_key_value_heads dividing it");
  LT_CHECK(linear_num_value_heads % linear_num_key_heads == 0,
           m + ": linear_num_value_heads " + std::to_string(linear_num_value_heads) +
               " is not divisible by linear_num_key_heads " + std::to_string(linear_num_key_heads),
           "each Gated DeltaNet key head serves an equal group of value heads",
           "choose linear_num_key_heads dividing it");
  LT_CHECK(linear_key_head_dim <= 256 && linear_value_head_dim <= 256,
           m + ": linear key/value head dims " + std::to_string(linear_key_head_dim) + " / " +
               std::to_string(linear_value_head_dim),
           "the Gated DeltaNet kernels take head dims of at most 256", "use smaller heads");
  LT_CHECK(head_dim % 2 == 0 && head_dim <= kRopeMaxHeadDim, m + ": head_dim " + std::to_string(head_dim),
           "RoPE rotates pairs of channels (an even head dim), and its kernels take at most " +
               std::to_string(kRopeMaxHeadDim),
           "use an even head_dim of at most " + std::to_string(kRopeMaxHeadDim));
  LT_CHECK(partial_rotary_factor > 0 && partial_rotary_factor <= 1 && rotary_dim() >= 2 && rotary_dim() % 2 == 0,
           m + ": partial_rotary_factor " + std::to_string(partial_rotary_factor) + " of head_dim " +
               std::to_string(head_dim),
           "the rotated part of a head is a positive, even number of its dims", "use e.g. 0.25 of 256");
  LT_CHECK(full.empty() || int64_t(full.size()) == num_hidden_layers,
           m + ": layer_types has " + std::to_string(full.size()) + " entries for " + std::to_string(num_hidden_layers) +
               " layers",
           "it names each layer's token mixer", "give one entry per layer");
  check_model_size("Qwen3.5", {num_parameters(), num_hidden_layers}, "num_hidden_layers",
                   "hidden_size, intermediate_size, num_hidden_layers, the head counts or vocab_size");
  for (auto [key, v] : {std::pair{"rms_norm_eps", rms_norm_eps}, {"rope_theta", rope_theta}})
    LT_CHECK(v > 0 && std::isfinite(v), m + ": " + key + " = " + std::to_string(v), "it must be positive",
             "fix the config");
  LT_CHECK(initializer_range >= 0 && std::isfinite(initializer_range),
           m + ": initializer_range = " + std::to_string(initializer_range), "it is a standard deviation", "use e.g. 0.02");
}

}  // namespace lt::models
