// One GEMM for several Linears: their weights as one [sum of out, in] weight. The parameter store
// places tensors made one after another back to back (each at a 512-byte boundary, which a
// weight of any usual shape already ends on), so the stack is usually a view and costs nothing;
// when it is not (a per-parameter build, odd sizes, 16-bit biases) it is a concatenation.
#include "autograd/gradient_parts.h"
#include "core/knobs.h"
#include "leantrain/autograd.h"
#include "leantrain/error.h"
#include "leantrain/nn_llama.h"
#include "ops/op_common.h"

namespace lt::nn {

namespace {

bool back_to_back(const std::vector<Tensor>& ws) {
  const Tensor& w0 = ws[0];
  if (!w0.storage()) return false;
  for (size_t i = 0; i < ws.size(); ++i) {
    const Tensor& w = ws[i];
    if (!w.is_contiguous() || w.storage() != w0.storage() || w.dtype() != w0.dtype() || w.dim() != w0.dim())
      return false;
    for (int64_t d = 1; d < w.dim(); ++d)
      if (w.size(d) != w0.size(d)) return false;
    if (i > 0 && w.offset() != ws[i - 1].offset() + ws[i - 1].numel()) return false;
  }
  return true;
}

// LEANTRAIN_GRADIENT_PARTS (on by default): the stacked gradient's blocks become the weights' .grad in place
// (read at each backward: the tests turn it on and off).
bool gradient_parts_on() { return knob_on("LEANTRAIN_GRADIENT_PARTS"); }

// Records out as the stack of ws (rows in order): its backward hands each its slice of the gradient.
void record_stack(Tensor& out, const std::vector<Tensor>& ws) {
  std::vector<int64_t> starts;
  int64_t rows = 0;
  for (const Tensor& w : ws) starts.push_back(rows), rows += w.size(0);
  record(out, "stacked_rows", ws, [=](const Tensor& g) {
    // A gradient of its own (the weight-gradient GEMM's output, nobody else's): its row blocks
    // become the weights' .grad in place, not copies (TinyLlama: 1.7 ms of copies a step).
    if (gradient_parts_on()) detail::offer_gradient_parts(g);
    std::vector<Tensor> grads;
    for (size_t i = 0; i < starts.size(); ++i)
      grads.push_back(slice(g, 0, starts[i], i + 1 < starts.size() ? starts[i + 1] : rows));
    return grads;
  });
}

}  // namespace

Tensor stacked_copies(const std::vector<Tensor>& copies, const std::vector<Tensor>& params) {
  if (copies.size() == 1) return copies[0];  // recorded as its parameter's cast already
  Tensor out;
  {
    NoGradGuard no_grad;
    out = stacked_rows(copies);
  }
  if (!grad_enabled() || !needs_grad(params)) return out;
  // The params' stack as a tensor without memory: only its shape and its backward are used.
  Tensor stack = tensor_over(nullptr, 0, out.shape(), contiguous_strides(out.shape()), params[0].dtype(),
                             params[0].device());
  record_stack(stack, params);
  detail::record_cast(out, stack);
  return out;
}

Tensor stacked_rows(const std::vector<Tensor>& ws) {
  LT_CHECK(!ws.empty(), "stacked_rows: no tensors", "there is nothing to stack", "pass at least one tensor");
  if (ws.size() == 1) return ws[0];
  if (!back_to_back(ws)) return concat(ws, 0);
  Shape shape = ws[0].shape();
  int64_t rows = 0;
  for (const Tensor& w : ws) rows += w.size(0);
  shape[0] = rows;
  Tensor out = make_view(ws[0], shape, contiguous_strides(shape), ws[0].offset());
  if (needs_grad(ws)) record_stack(out, ws);
  return out;
}

}  // namespace lt::nn
