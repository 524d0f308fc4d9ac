// DecoderLM (models/decoder_lm.h): the head, sampling and checkpoint naming the decoders share.
#include "models/decoder_lm.h"

#include "leantrain/autocast.h"
#include "leantrain/error.h"
#include "leantrain/ops.h"

namespace lt::models {

Tensor DecoderLM::forward(const Tensor& ids, const nn::TokenMask& mask) { return head(hidden_states(ids, mask)); }

Tensor DecoderLM::next_token_logits(const Tensor& ids) {
  Tensor h = hidden_states(ids);
  return head(reshape(select(h, 1, ids.size(1) - 1), {1, hidden_size_}));
}

std::vector<nn::Module*> DecoderLM::standalone_modules() {
  return untied_table_and_head(embed_tokens_.get(), lm_head_.get());
}

Tensor DecoderLM::tied_table() const { return lm_head_ ? Tensor() : embed_tokens_->weight(); }

// A tied head is the root's GEMM; an untied one is a module, counted at its call.
double DecoderLM::root_forward_flops(const Shape& input) const {
  if (lm_head_) return 0;
  double rows = 1;
  for (int64_t d : input) rows *= double(d);
  return 2 * rows * double(vocab_size_) * double(hidden_size_);
}

void DecoderLM::set_body(std::shared_ptr<nn::Embedding> embed_tokens, std::shared_ptr<nn::ModuleList> layers,
                         std::shared_ptr<nn::RMSNorm> norm) {
  embed_tokens_ = std::move(embed_tokens);
  layers_ = std::move(layers);
  norm_ = std::move(norm);
}

void DecoderLM::add_untied_head(nn::ParamFactory& pf, bool tied, double init_std) {
  if (tied) return;
  lm_head_ = register_module(
      "lm_head", std::make_shared<nn::Linear>(pf, hidden_size_, vocab_size_,
                                              nn::LinearOptions{.bias = false, .weight_init = nn::Init::normal(init_std)}));
}

Tensor DecoderLM::head(const Tensor& hidden) {
  if (lm_head_) return (*lm_head_)(hidden);
  return linear(autocast(hidden), autocast_tied(embed_tokens_->weight()), Tensor());
}

Model::HeadInputs DecoderLM::loss_head_inputs(const Tensor& ids, const nn::TokenMask& mask) {
  if (!lm_head_) return {autocast(hidden_states(ids, mask)), autocast_tied(embed_tokens_->weight())};
  nn::Linear* l = nn::plain_linear(lm_head_.get());
  if (!l || l->bias().defined() || l->weight_in_out()) return {};
  return {autocast(hidden_states(ids, mask)), autocast(l->weight())};
}

void DecoderLM::check_decoder_ids(const std::string& name, const Tensor& ids, int64_t pos_offset, int64_t max_positions) {
  LT_CHECK(ids.dim() == 2 && (ids.dtype() == DType::I64 || ids.dtype() == DType::I32),
           name + " input: token ids have shape " + shape_str(ids.shape()) + " and dtype " + dtype_name(ids.dtype()),
           "expected i64 or i32 [batch, time]", "pass token ids as a 2-D integer tensor");
  LT_CHECK(pos_offset >= 0 && pos_offset + ids.size(1) <= max_positions,
           name + " input: sequence of " + std::to_string(pos_offset + ids.size(1)) + " tokens",
           "the model has max_position_embeddings = " + std::to_string(max_positions), "use a shorter sequence");
}

Tensor DecoderLM::run_layers(Tensor x, const nn::TokenMask& mask) {
  for (size_t i = 0; i < layers_->size(); ++i) x = layers_->at<nn::PreNormBlock>(i)(x, mask);
  return (*norm_)(x);
}

std::string DecoderLM::text_tower_key(const std::string& key, std::initializer_list<const char*> skipped) const {
  if (key.ends_with("inv_freq")) return "";  // rotary buffers
  std::string k = key;
  for (const char* p : {"model.language_model.", "language_model.model."})
    if (k.starts_with(p)) k = "model." + k.substr(std::string(p).size());
  if (k == "language_model.lm_head.weight") k = "lm_head.weight";
  for (const char* p : skipped)
    if (k.starts_with(p)) return "";
  if (k == "lm_head.weight") return lm_head_ ? k : "";  // else tied to model.embed_tokens.weight
  if (k.starts_with("model.")) return k;
  return "model." + k;  // a bare *TextModel
}

DecoderLM::PositionOffsetScope::PositionOffsetScope(std::initializer_list<nn::RotaryEmbedding*> tables, int64_t offset)
    : tables_(tables) {
  for (nn::RotaryEmbedding* t : tables_) t->set_pos_offset(offset);
}

DecoderLM::PositionOffsetScope::~PositionOffsetScope() {
  for (nn::RotaryEmbedding* t : tables_) t->set_pos_offset(0);
}

}  // namespace lt::models
