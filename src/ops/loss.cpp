// Cross-entropy from logits. The kernel writes one f32 loss and one lse per row, so no
// probability tensor is ever allocated; the backward rebuilds softmax from logits and lse.
// Logits in padded rows (GPT-2's head: 50257 columns in rows of 50264) are read in place, and
// dlogits are written in the same padded rows.
// The mean divides by the number of non-ignored rows, counted on the host from the targets
// (they are read anyway to check their range; meta has no values and uses N).
#include "ops/op_common.h"

namespace lt {
using namespace detail;

namespace {

// The checked inputs of a cross-entropy: [N, V] logits (padded rows read in place, any other
// strided view copied), i64 targets [N] and the number of rows not ignored.
struct CeInputs {
  Device dev;
  Shape row_shape;
  int64_t N = 0, V = 0, count = 0;
  Tensor logits, logits2, targets1;
};

CeInputs ce_inputs(const Tensor& logits_in, const Tensor& targets_in, int64_t ignore_index) {
  CeInputs c;
  c.dev = common_device("cross_entropy", {logits_in, targets_in});
  check_floating("cross_entropy", logits_in);
  LT_CHECK(logits_in.dim() >= 2 && logits_in.size(-1) > 0,
           "cross_entropy: logits have shape " + shape_str(logits_in.shape()),
           "they must be [N, V] (or [..., V]) with V > 0", "reshape the logits");
  c.row_shape = Shape(logits_in.shape().begin(), logits_in.shape().end() - 1);
  LT_CHECK(targets_in.shape() == c.row_shape && (targets_in.dtype() == DType::I64 || targets_in.dtype() == DType::I32),
           std::string("cross_entropy: targets are ") + dtype_name(targets_in.dtype()) + " " +
               shape_str(targets_in.shape()),
           "logits " + shape_str(logits_in.shape()) + " need i64 targets " + shape_str(c.row_shape),
           "pass one class index per row");
  c.V = logits_in.size(-1), c.N = numel(c.row_shape);
  Tensor targets = contiguous_data(cast(targets_in, DType::I64));
  c.count = c.N;
  if (!c.dev.is_meta()) {
    c.count = 0;
    for (int64_t t : read_indices(targets)) {
      if (t == ignore_index) continue;
      LT_CHECK(t >= 0 && t < c.V, "cross_entropy: target " + std::to_string(t) + " is out of range",
               "there are " + std::to_string(c.V) + " classes and ignore_index is " + std::to_string(ignore_index),
               "check the labels against the vocabulary size");
      ++c.count;
    }
  }
  // Padded rows (a wide linear's logits) are read in place; any other strided view is copied.
  c.logits = padded_rows(logits_in) ? logits_in : contiguous(logits_in);
  const int64_t ld = padded_rows(c.logits);
  c.logits2 = make_view(c.logits, {c.N, c.V}, {ld, 1}, c.logits.offset());
  c.targets1 = make_view(targets, {c.N}, {1}, targets.offset());
  return c;
}

}  // namespace

Tensor cross_entropy(const Tensor& logits_in, const Tensor& targets_in, int64_t ignore_index, Reduction reduction) {
  OpNameScope op("cross_entropy");
  CeInputs c = ce_inputs(logits_in, targets_in, ignore_index);
  const Device dev = c.dev;
  const Shape row_shape = c.row_shape;
  const int64_t V = c.V, N = c.N, count = c.count;
  Tensor logits = c.logits, logits2 = c.logits2, targets1 = c.targets1;
  const DType aux = aux_dtype(logits.dtype());
  Tensor rows = Tensor::empty({N}, aux, dev);
  Tensor lse = Tensor::empty({N}, aux, dev);
  Backend& be = backend_for(dev);
  be.cross_entropy_fwd(rows, lse, logits2, targets1, ignore_index);
  const double inv = loss_scale(reduction, count);
  Tensor out = reduce_loss_rows(rows, row_shape, reduction, inv);
  if (!needs_grad({logits})) return out;
  const Shape ls = logits.shape();
  // dlogits come in the padded rows a linear gives this width, so the head's backward GEMMs
  // read them aligned and in place.
  const int64_t dld = padded_row_stride(V, logits.dtype());
  // The backward reads the logits, the lse and the targets (as the kernels' flat views).
  SavedTensor saved_logits(logits2), saved_lse(lse), saved_targets(targets1);
  record(out, "cross_entropy", {logits}, [=](const Tensor& g) {
    Tensor slogits = saved_logits.unpack(), slse = saved_lse.unpack(), stargets = saved_targets.unpack();
    Backend& b = backend_of(g);
    Tensor gc = contiguous_data(g);
    Tensor dloss = gc;
    if (reduction != Reduction::None) {  // broadcast the scalar gradient (times 1/count) to the rows
      Tensor gs = Tensor::empty({}, gc.dtype(), gc.device());
      b.unary(UnaryOp::Scale, gs, gc, float(inv));
      dloss = Tensor::empty({N}, gc.dtype(), gc.device());
      b.copy(dloss, expand_view(gs, {N}));
    }
    // In place when nothing else can read the logits again: this backward frees the graph, and
    // the saved view is the only one of its buffer (loss = model.loss(...): the caller holds no
    // logits). The kernels read and write each element in one thread, so dlogits may overwrite
    // them; this saves a logits-sized buffer at the peak of backward.
    const bool in_place = !backward_retains_graph() && slogits.storage().use_count() == 1 &&
                          padded_rows(slogits) == dld && slogits.size(0) > 0;
    Tensor dlogits = in_place ? rows_reshape_view(slogits, ls, dld) : empty_rows(ls, dld, slogits.dtype(), g.device());
    b.cross_entropy_bwd(make_view(dlogits, {N, V}, {dld, 1}, dlogits.offset()),
                        make_view(dloss, {N}, {1}, dloss.offset()), slogits, slse, stargets, ignore_index);
    return std::vector<Tensor>{dlogits};
  });
  return out;
}

Tensor cross_entropy_in_place(const Tensor& logits_in, const Tensor& targets_in, int64_t ignore_index) {
  // Only where the gradient can take the logits' place: they need one, their rows are the
  // padded rows the head's backward GEMMs read, and the loss is f32 (a 16- or 32-bit model).
  // The same test on every device, so a dry run takes the same path.
  const int64_t V = logits_in.dim() >= 1 ? logits_in.size(-1) : 0;
  if (!needs_grad({logits_in}) || logits_in.dim() < 2 || V <= 0 || aux_dtype(logits_in.dtype()) != DType::F32 ||
      padded_rows(logits_in) != padded_row_stride(V, logits_in.dtype()))
    return cross_entropy(logits_in, targets_in, ignore_index, Reduction::Mean);
  OpNameScope op("cross_entropy");
  CeInputs c = ce_inputs(logits_in, targets_in, ignore_index);
  const int64_t N = c.N, dld = padded_row_stride(V, c.logits.dtype());
  const Shape ls = c.logits.shape();
  Tensor rows = Tensor::empty({N}, DType::F32, c.dev);
  Tensor lse = Tensor::empty({N}, DType::F32, c.dev);
  const double inv = loss_scale(Reduction::Mean, c.count);
  Backend& be = backend_for(c.dev);
  // From here the logits' buffer holds d(mean loss)/d(logits).
  be.cross_entropy_fwd_bwd(rows, lse, c.logits2, c.targets1, ignore_index, float(inv));
  Tensor out = reduce_loss_rows(rows, {N}, Reduction::Mean, inv);
  SavedTensor saved(c.logits2);
  record(out, "cross_entropy", {c.logits}, [=](const Tensor& g) {
    Tensor d = saved.unpack();
    // loss.backward()'s seed of ones multiplies nothing; any other gradient scales the rows
    // (a copy of them when the graph is kept for another backward).
    if (!is_backward_seed(g)) {
      if (backward_retains_graph()) {
        Tensor copy = empty_rows(ls, dld, d.dtype(), g.device());
        Tensor copy2 = make_view(copy, {N, V}, {dld, 1}, copy.offset());
        backend_of(g).copy(copy2, d);
        d = copy2;
      }
      backend_of(g).scale_rows(d, contiguous_data(g));
    }
    return std::vector<Tensor>{rows_reshape_view(d, ls, dld)};
  });
  return out;
}

}  // namespace lt
