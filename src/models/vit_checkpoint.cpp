// ViT's Hugging Face checkpoint layout: transformers' ViTForImageClassification. The model keeps
// torchvision's structure (its parameters, module paths and fused in_proj), so each torchvision
// parameter maps to one HF tensor, except in_proj_weight/bias: rows [0, D) are query, [D, 2D) key,
// [2D, 3D) value, as torch.nn.MultiheadAttention packs them. Both layouts compute the same
// function: the patch conv, class token and position embeddings have the same shapes, and each
// block is pre-LN attention then a GELU MLP.
#include "leantrain/models.h"

namespace lt::models {

std::vector<CheckpointTensor> ViT::checkpoint_tensors() const {
  const int64_t D = cfg_.hidden_size;
  std::vector<CheckpointTensor> out;
  auto both = [&](const std::string& hf, const std::string& tv) {  // weight and bias
    out.push_back({hf + ".weight", tv + ".weight"});
    out.push_back({hf + ".bias", tv + ".bias"});
  };
  out.push_back({"vit.embeddings.cls_token", "class_token"});
  out.push_back({"vit.embeddings.position_embeddings", "encoder.pos_embedding"});
  both("vit.embeddings.patch_embeddings.projection", "conv_proj");
  for (int64_t i = 0; i < cfg_.num_hidden_layers; ++i) {
    const std::string hf = "vit.encoder.layer." + std::to_string(i) + ".";
    const std::string tv = "encoder.layers.encoder_layer_" + std::to_string(i) + ".";
    both(hf + "layernorm_before", tv + "ln_1");
    const char* qkv[] = {"query", "key", "value"};
    for (int64_t k = 0; k < 3; ++k) {
      const std::string name = hf + "attention.attention." + qkv[k];
      out.push_back({name + ".weight", tv + "self_attention.in_proj_weight", k * D, D});
      out.push_back({name + ".bias", tv + "self_attention.in_proj_bias", k * D, D});
    }
    both(hf + "attention.output.dense", tv + "self_attention.out_proj");
    both(hf + "layernorm_after", tv + "ln_2");
    both(hf + "intermediate.dense", tv + "mlp.0");
    both(hf + "output.dense", tv + "mlp.3");
  }
  both("vit.layernorm", "encoder.ln");
  both("classifier", "heads.head");
  return out;
}

}  // namespace lt::models
