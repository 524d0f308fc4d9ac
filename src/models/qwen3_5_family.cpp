// Qwen3.5 in the registry: model_type qwen3_5_text, and qwen3_5 (a multimodal checkpoint, of which
// leantrain builds the text tower and saves it as qwen3_5_text). The spec and family are
// decoder_family.h's; this file says what is Qwen3.5's own.
#include "models/decoder_family.h"
#include "models/qwen3_5.h"

namespace lt::models {

const ModelFamily& qwen3_5_text_family();
const ModelFamily& qwen3_5_family();

namespace {

struct Qwen35Traits {
  using Config = Qwen35Config;
  using Net = Qwen35;
  static const ModelFamily& family(const Config&) { return qwen3_5_text_family(); }
  static void set_depth(Config& c, int64_t depth) {
    c.num_hidden_layers = depth;
    c.full.clear();  // full_attention_interval then lays out the new depth
  }
  static int64_t kv_heads(const Config& c) { return c.num_key_value_heads; }
  static bool fixed_head_dim(const Config&) { return true; }
  static std::string summary(const Config& c) {
    int64_t full = 0;
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) full += c.is_full(i);
    return "dim " + std::to_string(c.hidden_size) + ", depth " + std::to_string(c.num_hidden_layers) + " (" +
           std::to_string(c.num_hidden_layers - full) + " DeltaNet, " + std::to_string(full) + " attention), heads " +
           std::to_string(c.num_attention_heads) + " (" + std::to_string(c.num_key_value_heads) + " kv), DeltaNet " +
           std::to_string(c.linear_num_key_heads) + "/" + std::to_string(c.linear_num_value_heads) + " heads, mlp " +
           std::to_string(c.intermediate_size);
  }
};

}  // namespace

// Listed in registry.cpp.
const ModelFamily& qwen3_5_text_family() {
  static const DecoderFamily<Qwen35Traits> f("qwen3_5_text", "Qwen3.5", Qwen35Config::preset_names());
  return f;
}

const ModelFamily& qwen3_5_family() {
  static const DecoderFamily<Qwen35Traits> f("qwen3_5", "Qwen3.5", {});
  return f;
}

}  // namespace lt::models
