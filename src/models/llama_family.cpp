// The LLaMA family in the registry: four model_types (llama, qwen2, qwen3, mistral) over one config
// (LlamaConfig) and one model (Llama), and the two MoE types (qwen3_moe, mixtral) over the same
// pair. The spec and families are decoder_family.h's; this file says what is the LLaMA family's own.
#include "models/decoder_family.h"
#include "models/llama.h"

namespace lt::models {

const ModelFamily& llama_family();
const ModelFamily& qwen2_family();
const ModelFamily& mistral_family();
const ModelFamily& qwen3_family();
const ModelFamily& qwen3_moe_family();
const ModelFamily& mixtral_family();

namespace {

const ModelFamily& family_for(const std::string& type) {
  if (type == "qwen2") return qwen2_family();
  if (type == "qwen3") return qwen3_family();
  if (type == "mistral") return mistral_family();
  if (type == "qwen3_moe") return qwen3_moe_family();
  if (type == "mixtral") return mixtral_family();
  return llama_family();
}

struct LlamaTraits {
  using Config = LlamaConfig;
  using Net = Llama;
  static const ModelFamily& family(const Config& c) { return family_for(c.model_type); }
  static void set_depth(Config& c, int64_t depth) {
    c.num_hidden_layers = depth;
    c.layer_sliding.clear();  // max_window_layers then lays out the new depth
  }
  static int64_t kv_heads(const Config& c) { return c.kv_heads(); }
  static bool fixed_head_dim(const Config& c) { return c.head_dim > 0; }
  static std::string summary(const Config& c) {
    std::string s = "dim " + std::to_string(c.hidden_size) + ", depth " + std::to_string(c.num_hidden_layers) +
                    ", heads " + std::to_string(c.num_attention_heads);
    if (c.kv_heads() != c.num_attention_heads) s += " (" + std::to_string(c.kv_heads()) + " kv)";
    if (c.moe())
      return s + ", " + std::to_string(c.num_experts) + " experts of " + std::to_string(c.expert_intermediate()) +
             " (" + std::to_string(c.num_experts_per_tok) + " a token)";
    return s + ", mlp " + std::to_string(c.intermediate_size);
  }
};

}  // namespace

// Listed in registry.cpp.
const ModelFamily& llama_family() {
  static const DecoderFamily<LlamaTraits> f("llama", "LLaMA",
                             {"llama-tiny", "smollm2-135m", "tinyllama-1.1b", "llama3.2-1b", "llama3-8b"});
  return f;
}

const ModelFamily& qwen2_family() {
  static const DecoderFamily<LlamaTraits> f("qwen2", "Qwen2", {"qwen2-0.5b"});
  return f;
}

const ModelFamily& qwen3_family() {
  static const DecoderFamily<LlamaTraits> f("qwen3", "Qwen3", {"qwen3-tiny", "qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-8b"});
  return f;
}

const ModelFamily& mistral_family() {
  static const DecoderFamily<LlamaTraits> f("mistral", "Mistral", {});
  return f;
}

const ModelFamily& qwen3_moe_family() {
  static const DecoderFamily<LlamaTraits> f("qwen3_moe", "Qwen3-MoE", {"qwen3-moe-tiny", "qwen3-30b-a3b"});
  return f;
}

const ModelFamily& mixtral_family() {
  static const DecoderFamily<LlamaTraits> f("mixtral", "Mixtral", {"mixtral-tiny", "mixtral-8x7b"});
  return f;
}

}  // namespace lt::models
