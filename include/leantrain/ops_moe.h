// Mixture-of-experts ops (ops/moe.cpp): transformers' Qwen3-MoE / Mixtral sparse MoE blocks as
// a router, a dispatch of the routed slots by expert, grouped GEMMs and a weighted combine. Kept
// apart from leantrain/ops.h so that the MoE ops do not recompile every file that includes it.
#pragma once
#include <cstdint>
#include <memory>

#include "leantrain/ops.h"

namespace lt {

struct Nf4Stack;  // quant/nf4.h

// N tokens routed to k of E experts each: R = N * k rows, grouped by expert.
// The load-balancing loss of one forward (transformers' load_balancing_loss_func with
// output_router_logits): coef * E * sum_e F[e] * P[e], F[e] the share of the routed slots that
// chose expert e and P[e] the mean probability of e, both over every token of every MoE layer
// (pooled, as transformers concatenates the layers' router logits); tokens whose token_mask is 0
// are left out. Each router adds its layer's sums in the forward (moe_route); moe_add_aux_loss
// adds the value to the loss and, in the backward, hands each router the gradient of its
// probabilities. One per forward (micro-batch): the routers' backward closures keep it.
struct MoeAuxLoss {
  double coef = 0.0;
  int64_t experts = 0;
  Tensor token_mask;              // u8 [N], or undefined: every token counts
  Tensor psum, counts, tokens;    // f32 (f64) [E], [E], [1]: summed over the layers so far
  Tensor aux_grad;                // f32 [E]: d(total loss)/d(probability of e), set in the backward
};
// The router: probs = softmax(logits [N, E]) in f32 (f64 for f64 logits), the top k (descending,
// ties to the lower expert), renormalised to sum 1 when renorm, as weights of `weights_dtype`
// (transformers: Qwen3-MoE rounds them to the logits' dtype, Mixtral keeps f32). Recorded: the
// weights' gradient reaches the logits through the top-k values and the softmax. aux (may be
// null): this layer's sums are added to it, and its gradient joins the backward.
struct MoeRoute {
  Tensor weights, idx;  // [N, k] weights_dtype, i32
};
MoeRoute moe_route(const Tensor& logits, int64_t k, bool renorm, DType weights_dtype,
                   const std::shared_ptr<MoeAuxLoss>& aux = nullptr);
// loss + the aux loss's value; its backward sets aux->aux_grad from the gradient it receives
// (the scale the total loss is backpropagated with: accumulation, loss scaling).
Tensor moe_add_aux_loss(const Tensor& loss, const std::shared_ptr<MoeAuxLoss>& aux);
// The rows of each expert: a stable sort of the routed slots by expert (not recorded; i32
// tensors on idx's device, all of fixed size R whatever the split).
struct MoeDispatch {
  Tensor offsets, rows, pos;  // [E + 1], [R], [R] (moe_ops.def, moe_sort)
  int64_t tokens = 0, k = 0, experts = 0;
};
MoeDispatch moe_dispatch(const Tensor& idx, int64_t experts);
// x [N, C] -> [R, C], row r a copy of its token's row (recorded: the gradient sums a token's k rows).
Tensor moe_gather(const Tensor& x, const MoeDispatch& d);
// Each expert's rows times its weight: xs [R, in] -> [R, out], w [E, out, in] (torch layout) or,
// w_in_out, [E, in, out]. One grouped GEMM each way (no loop of launches over the experts).
Tensor grouped_linear(const Tensor& xs, const Tensor& w, const MoeDispatch& d, bool w_in_out = false);
// grouped_linear(swiglu_packed(gate_up), w) keeping gate_up only (the activation is recomputed in
// the backward): an expert MLP keeps its gate | up rows, nothing I wide besides.
Tensor grouped_swiglu_linear(const Tensor& gate_up, const Tensor& w, const MoeDispatch& d, GateAct act = GateAct::Silu);
// NF4 expert weights (quant/nf4.h, Nf4Stack [E, out, in]): grouped_linear and
// grouped_swiglu_linear with w dequantised, to the rows' dtype, nf4_expert_group experts at a
// time into one Workspace buffer that lives only inside the op (the backward dequantises again).
// Only the rows get a gradient: the weights are frozen. The products are those of grouped_linear
// on nf4_stack_dequantize(w) (same kernels, same rows per expert).
Tensor grouped_linear_nf4(const Tensor& xs, const Nf4Stack& w, const MoeDispatch& d);
Tensor grouped_swiglu_linear_nf4(const Tensor& gate_up, const Nf4Stack& w, const MoeDispatch& d,
                                 GateAct act = GateAct::Silu);
// A grouped linear with its LoRA adapter: y = xs w_e^T + scaling (xs lin_e^T) lout_e for each
// expert's rows, lin [E, r, in], lout [E, r, out] (rows' dtype), w [E, out, in] or an NF4 stack.
// B A is never formed: the adapter is two grouped GEMMs of rank r, its product added in the
// second one's epilogue (no [R, out] update, no add), and in the backward the rows' gradient
// takes the adapter's term the same way (no sum of two [R, in] gradients). The product rounds
// once: base and adapter terms summed in f32.
Tensor grouped_lora_linear(const Tensor& xs, const Tensor& w, const Tensor& lin, const Tensor& lout, double scaling,
                           const MoeDispatch& d);
Tensor grouped_lora_linear_nf4(const Tensor& xs, const Nf4Stack& w, const Tensor& lin, const Tensor& lout,
                               double scaling, const MoeDispatch& d);
// Experts per dequantised group: as many as fit kNf4ExpertBufferBytes in `dtype` (at least one,
// at most all), or LEANTRAIN_NF4_EXPERT_GROUP when set.
inline constexpr int64_t kNf4ExpertBufferBytes = int64_t(64) << 20;
int64_t nf4_expert_group(const Nf4Stack& w, DType dtype);
// ys [R, C] -> [N, C]: each token's rows weighted by its router weights [N, k] and summed in
// expert order, rounded as transformers' index_add_ rounds (backend/moe_ops.def, moe_combine).
Tensor moe_combine(const Tensor& ys, const Tensor& weights, const Tensor& idx, const MoeDispatch& d);

}  // namespace lt
