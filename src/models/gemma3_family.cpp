// Gemma 3 in the registry: model_type gemma3_text, and gemma3 (a multimodal checkpoint, of which
// leantrain builds the text tower and saves it as gemma3_text). The spec and family are
// decoder_family.h's; this file says what is Gemma 3's own.
#include "models/decoder_family.h"
#include "models/gemma3.h"

namespace lt::models {

const ModelFamily& gemma3_text_family();
const ModelFamily& gemma3_family();

namespace {

struct Gemma3Traits {
  using Config = Gemma3Config;
  using Net = Gemma3;
  static const ModelFamily& family(const Config&) { return gemma3_text_family(); }
  static void set_depth(Config& c, int64_t depth) {
    c.num_hidden_layers = depth;
    c.sliding.clear();  // the sliding_window_pattern then lays out the new depth
  }
  static int64_t kv_heads(const Config& c) { return c.num_key_value_heads; }
  static bool fixed_head_dim(const Config&) { return true; }
  static std::string summary(const Config& c) {
    return "dim " + std::to_string(c.hidden_size) + ", depth " + std::to_string(c.num_hidden_layers) + ", heads " +
           std::to_string(c.num_attention_heads) + " (" + std::to_string(c.num_key_value_heads) + " kv), mlp " +
           std::to_string(c.intermediate_size) + ", window " + std::to_string(c.sliding_window);
  }
};

}  // namespace

// Listed in registry.cpp.
const ModelFamily& gemma3_text_family() {
  static const DecoderFamily<Gemma3Traits> f("gemma3_text", "Gemma3", Gemma3Config::preset_names());
  return f;
}

const ModelFamily& gemma3_family() {
  static const DecoderFamily<Gemma3Traits> f("gemma3", "Gemma3", {});
  return f;
}

}  // namespace lt::models
