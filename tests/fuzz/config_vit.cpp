// ViTConfig::from_json on arbitrary config.json text, then the sizes building the model would
// compute (every parameter's element count and f32 bytes, and their total), without allocating
// it: a config that from_json accepts must have sizes that fit in int64, and a total equal to
// the closed form num_parameters() that the size limit checks.
#include "config_sizes.h"
#include "fuzz_input.h"
#include "leantrain/models.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  lt::fuzz::rejects_only_with_error([&] {
    const lt::models::ViTConfig c = lt::models::ViTConfig::from_json(std::string(lt::fuzz::as_text(data, size)));
    const int64_t D = c.hidden_size, H = c.intermediate_size;
    lt::fuzz::ParameterSizes p("ViT");
    p.add("conv_proj.weight", {D, c.num_channels, c.patch_size, c.patch_size});
    p.add("conv_proj.bias", {D});
    p.add("class_token", {1, 1, D});
    p.add("encoder.pos_embedding", {1, lt::fuzz::add(c.num_patches(), 1, "num_patches + 1"), D});
    lt::fuzz::ParameterSizes block("ViT encoder layer");
    block.add("ln_1", {D}, 2);
    block.add("self_attention.in_proj_weight", {lt::fuzz::mul(3, D, "3 * hidden_size"), D});
    block.add("self_attention.in_proj_bias", {lt::fuzz::mul(3, D, "3 * hidden_size")});
    block.add("self_attention.out_proj.weight", {D, D});
    block.add("self_attention.out_proj.bias", {D});
    block.add("ln_2", {D}, 2);
    block.add("mlp.0.weight", {H, D});
    block.add("mlp.0.bias", {H});
    block.add("mlp.3.weight", {D, H});
    block.add("mlp.3.bias", {D});
    p.add_repeated("encoder.layers", block, c.num_hidden_layers);
    p.add("encoder.ln", {D}, 2);
    p.add("heads.head.weight", {c.num_labels, D});
    p.add("heads.head.bias", {c.num_labels});
    lt::fuzz::require(double(p.elements()) == c.num_parameters(),
                      "num_parameters() (" + std::to_string(c.num_parameters()) + ") counts the parameters built (" +
                          std::to_string(p.elements()) + ")");
  });
  return 0;
}
