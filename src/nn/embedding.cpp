// Token/position embeddings, dropout and the ViT patch embedding: the layers that turn raw
// inputs into [B, T, C] activations.
#include "leantrain/autocast.h"
#include "leantrain/error.h"
#include "leantrain/nn.h"

namespace lt::nn {

Embedding::Embedding(ParamFactory& pf, int64_t num, int64_t dim, const Init& init, int64_t padding_idx)
    : padding_idx_(padding_idx) {
  LT_CHECK(padding_idx >= -1 && padding_idx < num, "embedding: padding_idx " + std::to_string(padding_idx),
           "the table has " + std::to_string(num) + " rows", "pass a row index, or -1 for none");
  weight_ = &register_parameter("weight", pf.make({num, dim}, init));
}

// Under autocast the output is cast, not the table: the residual stream starts in 16-bit.
Tensor Embedding::forward(const Tensor& ids) { return autocast(embedding(ids, *weight_, padding_idx_)); }

Tensor Dropout::forward(const Tensor& x) { return dropout(x, p_, is_training() && p_ > 0.0, gen_); }

PatchEmbedding::PatchEmbedding(ParamFactory& pf, int64_t channels, int64_t dim, int64_t patch, const Init& weight_init)
    : channels_(channels), dim_(dim), patch_(patch) {
  weight_ = &register_parameter("weight", pf.make({dim, channels, patch, patch}, weight_init));
  bias_ = &register_parameter("bias", pf.make({dim}, Init::zeros()));
}

Tensor PatchEmbedding::forward(const Tensor& images) {
  LT_CHECK(images.dim() == 4 && images.size(1) == channels_,
           "patch embedding: images have shape " + shape_str(images.shape()),
           "expected [B, " + std::to_string(channels_) + ", H, W]", "check num_channels and the image layout (NCHW)");
  Tensor patches = patchify(images, patch_);  // [B, N, C*p*p], flattened like the conv kernel
  Tensor w = reshape(*weight_, {dim_, channels_ * patch_ * patch_});
  return linear(autocast(patches), autocast(w), autocast(*bias_));
}

}  // namespace lt::nn
