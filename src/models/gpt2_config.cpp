#include <nlohmann/json.hpp>

#include "leantrain/models.h"
#include "core/checked_math.h"
#include "models/config_json.h"
#include "models/size_limits.h"

namespace lt::models {
using namespace detail;

GPT2Config GPT2Config::preset(const std::string& name) {
  GPT2Config c;  // defaults are GPT-2 124M
  if (name == "gpt2-124m" || name == "gpt2") return c;
  if (name == "gpt2-tiny") {  // byte-level, trains on a laptop CPU in minutes
    c.vocab_size = 256;
    c.n_positions = 256;
    c.n_embd = 128;
    c.n_layer = 4;
    c.n_head = 4;
    c.resid_pdrop = c.embd_pdrop = c.attn_pdrop = 0.0;
    return c;
  }
  fail("unknown GPT-2 preset '" + name + "'", "known: gpt2-124m, gpt2-tiny", "use one of those or a config.json");
}

GPT2Config GPT2Config::from_json(const std::string& text) {
  nlohmann::json j = parse_config(text);
  check_model_type(j, "gpt2");
  GPT2Config c;
  read_int(j, "vocab_size", c.vocab_size);
  read_int(j, "n_ctx", c.n_positions);  // older configs; n_positions wins when both are present
  read_int(j, "n_positions", c.n_positions);
  read_int(j, "n_embd", c.n_embd);
  read_int(j, "n_layer", c.n_layer);
  read_int(j, "n_head", c.n_head);
  read_int(j, "n_inner", c.n_inner);
  read_double(j, "layer_norm_epsilon", c.layer_norm_epsilon);
  read_string(j, "activation_function", c.activation_function);
  read_double(j, "resid_pdrop", c.resid_pdrop);
  read_double(j, "embd_pdrop", c.embd_pdrop);
  read_double(j, "attn_pdrop", c.attn_pdrop);
  read_bool(j, "tie_word_embeddings", c.tie_word_embeddings);
  c.validate();
  return c;
}

std::string GPT2Config::to_json() const {
  nlohmann::json j = {{"model_type", "gpt2"},
                      {"architectures", {"GPT2LMHeadModel"}},
                      {"vocab_size", vocab_size},
                      {"n_positions", n_positions},
                      {"n_embd", n_embd},
                      {"n_layer", n_layer},
                      {"n_head", n_head},
                      {"n_inner", n_inner > 0 ? nlohmann::json(n_inner) : nlohmann::json(nullptr)},
                      {"layer_norm_epsilon", layer_norm_epsilon},
                      {"activation_function", activation_function},
                      {"resid_pdrop", resid_pdrop},
                      {"embd_pdrop", embd_pdrop},
                      {"attn_pdrop", attn_pdrop},
                      {"tie_word_embeddings", tie_word_embeddings}};
  return j.dump(2);
}

GeluApprox GPT2Config::gelu_approx() const {
  if (activation_function == "gelu_new" || activation_function == "gelu_pytorch_tanh" ||
      activation_function == "gelu_fast")
    return GeluApprox::Tanh;
  if (activation_function == "gelu") return GeluApprox::Erf;
  fail("GPT-2 config: activation_function '" + activation_function + "' is not supported",
       "leantrain's GPT-2 MLP is GELU", "use gelu_new, gelu_pytorch_tanh or gelu");
}

int64_t GPT2Config::mlp_width() const {
  return n_inner > 0 ? n_inner : checked_mul<int64_t>(4, n_embd, "GPT-2 MLP width 4 * n_embd", "use a smaller n_embd");
}

double GPT2Config::num_parameters() const {
  const double V = double(vocab_size), P = double(n_positions), C = double(n_embd), L = double(n_layer);
  const double F = n_inner > 0 ? double(n_inner) : 4 * C;
  // Per block: ln_1 and ln_2 (4C), c_attn (3C^2 + 3C), c_proj (C^2 + C), c_fc (CF + F), mlp.c_proj (FC + C).
  const double block = 4 * C * C + 2 * C * F + 9 * C + F;
  return V * C + P * C + L * block + 2 * C + (tie_word_embeddings ? 0 : V * C);
}

void GPT2Config::validate() const {
  check_positive("GPT-2", "vocab_size", vocab_size);
  check_positive("GPT-2", "n_positions", n_positions);
  check_positive("GPT-2", "n_embd", n_embd);
  check_positive("GPT-2", "n_layer", n_layer);
  check_positive("GPT-2", "n_head", n_head);
  LT_CHECK(n_inner >= 0, "GPT-2 config: n_inner = " + std::to_string(n_inner), "it must be positive or null",
           "fix the config");
  LT_CHECK(n_embd % n_head == 0, "GPT-2 config: n_embd " + std::to_string(n_embd),
           "is not divisible by n_head " + std::to_string(n_head), "choose n_head dividing n_embd");
  LT_CHECK(layer_norm_epsilon > 0, "GPT-2 config: layer_norm_epsilon must be positive",
           "got " + std::to_string(layer_norm_epsilon), "use e.g. 1e-5");
  for (auto [key, p] : {std::pair{"resid_pdrop", resid_pdrop}, {"embd_pdrop", embd_pdrop}, {"attn_pdrop", attn_pdrop}})
    LT_CHECK(p >= 0 && p < 1, std::string("GPT-2 config: ") + key + " = " + std::to_string(p),
             "a dropout probability is in [0, 1)", "fix the config");
  (void)gelu_approx();
  check_model_size("GPT-2", {num_parameters(), n_layer}, "n_layer",
                   "n_embd, n_layer, n_inner, vocab_size or n_positions");
  (void)mlp_width();  // fits, given the size check; computed checked all the same
}

}  // namespace lt::models
