// The model-independent parts of every model (the factory is in registry.cpp).
#include "autograd/forward_context.h"
#include "leantrain/error.h"
#include "leantrain/ops_moe.h"
#include "leantrain/models.h"

namespace lt::models {

Tensor Model::loss(const Tensor& input, const Tensor& targets, const Tensor& mask) {
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

Tensor Model::chunked_loss_sum(const Tensor& input, const Tensor& targets, const Tensor& mask) {
  if (loss_chunk_ <= 0) return Tensor();
  HeadInputs h = loss_head_inputs(input, mask);
  if (!h.weight.defined()) return Tensor();
  return linear_cross_entropy(h.hidden, h.weight, reshape(targets, {-1}), -100, Reduction::Sum, loss_chunk_);
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
