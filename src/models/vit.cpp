// ViT as torchvision's VisionTransformer: the patch conv runs as patchify + linear over the
// flattened [D, C, p, p] kernel, a learned class token is prepended, pre-LN encoder blocks
// (eps 1e-6, exact GELU), and the head reads token 0. Names and shapes match torchvision.
#include <cmath>

#include "leantrain/autocast.h"
#include "leantrain/error.h"
#include "leantrain/models.h"

namespace lt::models {

namespace {

class VitEncoder : public nn::Module {
 public:
  const char* type_name() const override { return "Encoder"; }
  VitEncoder(const ViTConfig& c, nn::ParamFactory& pf) {
    const int64_t D = c.hidden_size;
    pos_embedding = &register_parameter("pos_embedding", pf.make({1, c.num_patches() + 1, D}, nn::Init::normal(0.02)));
    dropout = register_module("dropout", std::make_shared<nn::Dropout>(c.dropout, pf.next_seed()));
    layers = register_module("layers", std::make_shared<nn::ModuleList>());
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
      auto ln_1 = std::make_shared<nn::LayerNorm>(pf, D, c.layer_norm_eps);
      auto attn = std::make_shared<nn::MultiheadSelfAttention>(pf, D, c.num_attention_heads);
      auto ln_2 = std::make_shared<nn::LayerNorm>(pf, D, c.layer_norm_eps);
      // torchvision's MLPBlock is Sequential(Linear, GELU, Dropout, Linear, Dropout): fc1 = "0", fc2 = "3".
      nn::MlpOptions mo{.dim = D,
                        .hidden = c.intermediate_size,
                        .approx = GeluApprox::Erf,
                        .layout = nn::WeightLayout::OutIn,
                        .fc1_init = nn::Init::xavier_uniform(D, c.intermediate_size),
                        .fc2_init = nn::Init::xavier_uniform(c.intermediate_size, D),
                        .dropout = c.dropout,
                        .fc1_name = "0",
                        .fc2_name = "3",
                        .dropout_name = "4",
                        .act_name = "1"};
      auto mlp = std::make_shared<nn::Mlp>(pf, mo);
      layers->append(std::make_shared<nn::PreNormBlock>("EncoderBlock", ln_1, attn, ln_2, mlp,
                                                        nn::BlockNames{.attn = "self_attention"}),
                     "encoder_layer_" + std::to_string(i));
    }
    ln = register_module("ln", std::make_shared<nn::LayerNorm>(pf, D, c.layer_norm_eps));
  }
  Tensor* pos_embedding;
  std::shared_ptr<nn::Dropout> dropout;
  std::shared_ptr<nn::ModuleList> layers;
  std::shared_ptr<nn::LayerNorm> ln;
};

}  // namespace

ViT::ViT(const ViTConfig& cfg, const nn::InitOptions& init) : cfg_(cfg) {
  cfg_.validate();
  nn::ParamFactory pf(init);
  const int64_t D = cfg_.hidden_size, fan_in = cfg_.num_channels * cfg_.patch_size * cfg_.patch_size;
  conv_proj_ = register_module("conv_proj", std::make_shared<nn::PatchEmbedding>(
                                                pf, cfg_.num_channels, D, cfg_.patch_size,
                                                nn::Init::normal(std::sqrt(1.0 / double(fan_in)))));
  class_token_ = &register_parameter("class_token", pf.make({1, 1, D}, nn::Init::zeros()));
  auto enc = register_module("encoder", std::make_shared<VitEncoder>(cfg_, pf));
  pos_embedding_ = enc->pos_embedding;
  drop_ = enc->dropout;
  layers_ = enc->layers;
  ln_ = enc->ln;
  auto heads = register_module("heads", std::make_shared<nn::ModuleList>());
  // torchvision starts the classifier at zero.
  head_ = std::make_shared<nn::Linear>(pf, D, cfg_.num_labels,
                                       nn::LinearOptions{.weight_init = nn::Init::zeros()});
  heads->append(head_, "head", /*owner_keeps_it=*/true);  // forward calls head_
  pf.materialize();  // the parameter store: one flat buffer, filled in registration order
}

Tensor ViT::forward(const Tensor& images_in, const nn::TokenMask& mask) {
  LT_CHECK(!mask.key_padding.defined() && !mask.doc_pos.defined(), "ViT forward: a mask was given", "a ViT attends over all patches", "pass no mask");
  const int64_t S = cfg_.image_size;
  LT_CHECK(images_in.dim() == 4 && images_in.size(1) == cfg_.num_channels && images_in.size(2) == S &&
               images_in.size(3) == S,
           "ViT input: images have shape " + shape_str(images_in.shape()),
           "expected [B, " + std::to_string(cfg_.num_channels) + ", " + std::to_string(S) + ", " + std::to_string(S) + "]",
           "resize the images or set image_size/num_channels in the config");
  // Images go straight to the compute dtype under autocast, else to the parameters'.
  const DType dt = autocast_dtype().value_or(class_token_->dtype());
  Tensor images = images_in.dtype() == dt ? images_in : cast(images_in, dt);
  const int64_t B = images.size(0), D = cfg_.hidden_size;
  Tensor x = (*conv_proj_)(images);  // [B, N, D]
  x = concat({expand(autocast(*class_token_), {B, 1, D}), x}, 1);
  x = (*drop_)(add(x, autocast(*pos_embedding_)));
  for (size_t i = 0; i < layers_->size(); ++i) x = layers_->at<nn::PreNormBlock>(i)(x);
  // LayerNorm is per token, so normalising only the class token equals torchvision's ln-then-slice.
  x = (*ln_)(select(x, 1, 0));  // [B, D]
  return (*head_)(x);
}

}  // namespace lt::models
