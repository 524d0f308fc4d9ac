// GPT2Config::from_json on arbitrary config.json text, then the sizes building the model would
// compute (every parameter's element count and f32 bytes, and their total), without allocating
// it: a config that from_json accepts must have sizes that fit in int64, and a total equal to
// the closed form num_parameters() that the size limit checks.
#include "config_sizes.h"
#include "fuzz_input.h"
#include "leantrain/models.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  lt::fuzz::rejects_only_with_error([&] {
    const lt::models::GPT2Config c = lt::models::GPT2Config::from_json(std::string(lt::fuzz::as_text(data, size)));
    const int64_t C = c.n_embd, H = c.mlp_width();
    lt::fuzz::ParameterSizes p("GPT-2");
    p.add("transformer.wte.weight", {c.vocab_size, C});  // also the tied lm_head
    p.add("transformer.wpe.weight", {c.n_positions, C});
    lt::fuzz::ParameterSizes block("GPT-2 block");
    block.add("ln_1", {C}, 2);
    block.add("attn.c_attn.weight", {C, lt::fuzz::mul(3, C, "3 * n_embd")});
    block.add("attn.c_attn.bias", {lt::fuzz::mul(3, C, "3 * n_embd")});
    block.add("attn.c_proj.weight", {C, C});
    block.add("attn.c_proj.bias", {C});
    block.add("ln_2", {C}, 2);
    block.add("mlp.c_fc.weight", {C, H});
    block.add("mlp.c_fc.bias", {H});
    block.add("mlp.c_proj.weight", {H, C});
    block.add("mlp.c_proj.bias", {C});
    p.add_repeated("transformer.h", block, c.n_layer);
    p.add("transformer.ln_f", {C}, 2);
    if (!c.tie_word_embeddings) p.add("lm_head.weight", {c.vocab_size, C});
    lt::fuzz::require(double(p.elements()) == c.num_parameters(),
                      "num_parameters() (" + std::to_string(c.num_parameters()) + ") counts the parameters built (" +
                          std::to_string(p.elements()) + ")");
  });
  return 0;
}
