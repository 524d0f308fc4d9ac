// The model-independent parts of every model (the factory is in registry.cpp).
#include "autograd/forward_context.h"
#include "leantrain/error.h"
#include "leantrain/ops_moe.h"
#include "leantrain/models.h"

namespace lt::models {

Tensor Model::loss(const Tensor& input, const Tensor& targets, const nn::TokenMask& mask) {
  if (loss_chunk_ > 0) {
    HeadInputs h = loss_head_inputs(input, mask);
    if (h.weight.defined()) {
      LT_CHECK(targets.numel() * h.hidden.size(-1) == h.hidden.numel(), "loss: targets have shape " + shape_str(targets.shape()),
               "hidden states are " + shape_str(h.hidden.shape()) + " (one target per row expected)",
               "pass one class index per prediction");
      return moe_add_aux_loss(
          linear_cross_entropy(h.hidden, h.weight, reshape(targets, {-1}), -100, Reduction::Mean, loss_chunk_),
          take_pending_moe_aux(this));
    }
  }
  Tensor logits = forward(input, mask);
  const int64_t V = logits.size(-1);
  LT_CHECK(targets.numel() * V == logits.numel(), "loss: targets have shape " + shape_str(targets.shape()),
           "logits are " + shape_str(logits.shape()) + " (one target per row expected)",
           "pass one class index per prediction");
  // Nothing reads the logits after the loss: their buffer takes the gradient in the same pass.
  // A mixture-of-experts model's load-balancing loss, when its forward made one (output_router_logits).
  return moe_add_aux_loss(cross_entropy_in_place(reshape(logits, {-1, V}), reshape(targets, {-1})),
                          take_pending_moe_aux(this));
}

Tensor Model::token_losses(const Tensor& input, const Tensor& targets, const nn::TokenMask& mask) {
  if (loss_chunk_ > 0) {
    HeadInputs h = loss_head_inputs(input, mask);
    if (h.weight.defined()) {
      LT_CHECK(targets.numel() * h.hidden.size(-1) == h.hidden.numel(), "token_losses: targets have shape " + shape_str(targets.shape()),
               "hidden states are " + shape_str(h.hidden.shape()) + " (one target per row expected)",
               "pass one class index per prediction");
      Tensor rows = linear_cross_entropy(h.hidden, h.weight, reshape(targets, {-1}), -100, Reduction::None, loss_chunk_);
      return reshape(rows, targets.shape());
    }
  }
  Tensor logits = forward(input, mask);
  const int64_t V = logits.size(-1);
  LT_CHECK(targets.numel() * V == logits.numel(), "token_losses: targets have shape " + shape_str(targets.shape()),
           "logits are " + shape_str(logits.shape()) + " (one target per row expected)",
           "pass one class index per prediction");
  // The caller holds no logits, so the backward writes dlogits over them (cross_entropy's in-place case).
  Tensor rows = cross_entropy(reshape(logits, {-1, V}), reshape(targets, {-1}), -100, Reduction::None);
  return reshape(rows, targets.shape());
}

Tensor Model::chunked_loss_sum(const Tensor& input, const Tensor& targets, const nn::TokenMask& mask) {
  if (loss_chunk_ <= 0) return Tensor();
  HeadInputs h = loss_head_inputs(input, mask);
  if (!h.weight.defined()) return Tensor();
  return linear_cross_entropy(h.hidden, h.weight, reshape(targets, {-1}), -100, Reduction::Sum, loss_chunk_);
}

nn::TokenMask Model::decoder_mask(const std::string& name, const nn::TokenMask& mask, int64_t B, int64_t T,
                                  int64_t pos_offset) {
  nn::TokenMask m = mask;
  if (m.key_padding.defined()) {
    LT_CHECK(m.key_padding.shape() == Shape({B, T}), name + " attention mask has shape " + shape_str(m.key_padding.shape()),
             "expected " + shape_str({B, T}) + " like the ids", "pass one 0/1 entry per token");
    if (m.key_padding.dtype() != DType::U8) m.key_padding = cast(m.key_padding, DType::U8);
  }
  if (m.doc_pos.defined()) {
    LT_CHECK(m.doc_pos.dtype() == DType::I32 && m.doc_pos.shape() == Shape({B, T}),
             name + " document positions are " + dtype_name(m.doc_pos.dtype()) + " " + shape_str(m.doc_pos.shape()),
             "expected i32 " + shape_str({B, T}) + " like the ids: each token's position inside its document",
             "pass one int32 position per token");
    LT_CHECK(pos_offset == 0, name + " input: document positions with position offset " + std::to_string(pos_offset),
             "packed documents start at position 0 of their row", "pass one or the other");
  }
  if (m.text.defined())
    LT_CHECK(m.text.dtype() == DType::U8 && m.text.shape() == Shape({B, T}),
             name + " text mask is " + dtype_name(m.text.dtype()) + " " + shape_str(m.text.shape()),
             "expected u8 " + shape_str({B, T}) + " like the ids: 1 for text, 0 for padding", "pass one u8 per token");
  return m;
}

Device Model::device() const {
  auto ps = parameters();
  LT_ASSERT(!ps.empty());
  return ps.front().device();
}

std::vector<CheckpointTensor> Model::checkpoint_tensors() const {
  std::vector<CheckpointTensor> out;
  for (const auto& [name, t] : named_parameters()) out.push_back({name, name});
  for (const auto& [name, t] : named_buffers()) out.push_back({name, name, 0, -1, true});
  return out;
}

std::vector<nn::Module*> Model::untied_table_and_head(nn::Module* table, nn::Module* head) const {
  if (!head) return {};
  std::vector<nn::Module*> out{table};
  if (loss_chunk_ <= 0) out.push_back(head);
  return out;
}

DType Model::dtype() const {
  auto ps = parameters();
  LT_ASSERT(!ps.empty());
  return ps.front().dtype();
}

}  // namespace lt::models
