// Cross-entropy of a bias-free linear head (logits = hidden W^T) without the [N, V] logits: the
// rows go through the head a chunk at a time. The forward keeps one f32 loss and lse per row;
// the backward recomputes each chunk's logits, turns them into dlogits in place (the
// cross_entropy_bwd kernel) and multiplies them into dHidden and dW. The peak holds one chunk
// of logits, in the padded rows a linear of this width writes (so each chunk is exactly the
// rows the unchunked linear + cross_entropy would compute, with the same kernels).
// Composed from backend ops (gemm, cross_entropy_fwd/bwd, reduce_sum), so every backend and the
// meta plan get it as is.
//
// Eager (LEANTRAIN_LOSS_CHUNK_EAGER=1, a mean or summed loss, bf16/f32): the loss is the graph's
// last op, so its gradient is known up to the scalar that backward brings (1 for loss.backward(),
// 1/k over micro-batches). The forward then turns each chunk's logits into dlogits right away and
// multiplies them into dHidden and dW, as the backward would, keeping those two instead of
// recomputing the logits: no second head GEMM. The backward multiplies them by its scalar in
// place (none for loss.backward()'s seed). For a scalar of 1 (or a power of two) the bits are the
// recomputing backward's. Not for
// f16, whose loss scale must reach dlogits before they are rounded.
#include <algorithm>
#include <memory>

#include "core/knobs.h"
#include "ops/op_common.h"

namespace lt {
using namespace detail;

namespace {

constexpr int64_t kAutoChunkBytes = int64_t(256) << 20;  // one chunk's logits at 4 bytes each

// Rows per chunk: `chunk` if positive, else as many as keep chunk x ld x 4 bytes <= 256 MiB.
int64_t chunk_rows(int64_t chunk, int64_t n, int64_t ld) {
  int64_t c = chunk > 0 ? chunk : std::max<int64_t>(1, kAutoChunkBytes / (ld * 4));
  return std::max<int64_t>(1, std::min(c, n));
}

// Rows [r0, r0 + n) of a [N, W] tensor in rows of ld.
Tensor row_block(const Tensor& t, int64_t r0, int64_t n, int64_t w, int64_t ld) {
  return make_view(t, {n, w}, {ld, 1}, t.offset() + r0 * ld);
}
Tensor row_slice(const Tensor& t, int64_t r0, int64_t n) { return make_view(t, {n}, {1}, t.offset() + r0); }

// logits rows [r0, r0 + n) = hidden rows x W^T, into `buf` (rows of ld).
Tensor chunk_logits(Backend& be, const Tensor& buf, const Tensor& hidden, const Tensor& w, int64_t r0, int64_t n,
                    int64_t V, int64_t C, int64_t ld) {
  Tensor logits = row_block(buf, 0, n, V, ld);
  GemmDesc d;
  d.m = n, d.n = V, d.k = C;
  d.trans_b = true;
  d.ldc = ld;
  be.gemm(logits, row_block(hidden, r0, n, C, C), w, d, Tensor());
  return logits;
}

// A chunk's dlogits [n, V] (rows of ld) into dHidden rows [r0, r0 + n) and dW (either may be
// undefined): dHidden rows = dlogits @ W; dW (+)= dlogits^T @ hidden rows, accumulated in W's
// dtype (the first chunk writes, the others add).
void multiply_dlogits(Backend& b, const Tensor& dlogits, const Tensor& hidden, const Tensor& w, const Tensor& dh,
                      const Tensor& dw, int64_t r0, int64_t n, int64_t V, int64_t C, int64_t ld) {
  if (dh.defined()) {
    GemmDesc gd;
    gd.m = n, gd.n = C, gd.k = V;
    gd.lda = ld;
    b.gemm(row_block(dh, r0, n, C, C), dlogits, w, gd, Tensor());
  }
  if (dw.defined()) {
    GemmDesc gd;
    gd.m = V, gd.n = C, gd.k = n;
    gd.trans_a = true;
    gd.lda = ld;
    gd.beta = r0 == 0 ? 0.0f : 1.0f;
    b.gemm(dw, dlogits, row_block(hidden, r0, n, C, C), gd, Tensor());
  }
}

// dHidden and dW (allocated where wanted; undefined otherwise) of the rows [0, N), a chunk at a
// time: each chunk's logits, turned into dlogits in place by `to_dlogits(logits, r0, n)`, then
// multiplied in. What both the eager forward and the recomputing backward run.
template <class ToDlogits>
std::pair<Tensor, Tensor> head_gradients(Backend& b, const Tensor& hidden, const Tensor& w, bool need_h, bool need_w,
                                         const Shape& hidden_shape, int64_t N, int64_t rows_per, int64_t V, int64_t C,
                                         int64_t ld, DType dt, Device d, ToDlogits&& to_dlogits) {
  Tensor dh = need_h ? Tensor::empty(hidden_shape, dt, d) : Tensor();
  Tensor dw = need_w ? Tensor::empty({V, C}, dt, d) : Tensor();
  Tensor buf = empty_rows({rows_per, V}, ld, dt, d);
  for (int64_t r0 = 0; r0 < N; r0 += rows_per) {
    const int64_t n = std::min(rows_per, N - r0);
    Tensor logits = chunk_logits(b, buf, hidden, w, r0, n, V, C, ld);
    to_dlogits(logits, r0, n);
    multiply_dlogits(b, logits, hidden, w, dh, dw, r0, n, V, C, ld);
  }
  if (need_w && N == 0) b.fill(dw, 0.0);
  if (need_h && N == 0) b.fill(dh, 0.0);
  return {dh, dw};
}

}  // namespace

Tensor linear_cross_entropy(const Tensor& hidden_in, const Tensor& weight_in, const Tensor& targets_in,
                            int64_t ignore_index, Reduction reduction, int64_t chunk) {
  OpNameScope op("linear_cross_entropy");
  Device dev = common_device("linear_cross_entropy", {hidden_in, weight_in, targets_in});
  check_floating("linear_cross_entropy", hidden_in);
  check_same_dtype("linear_cross_entropy", hidden_in, weight_in);
  check_rank("linear_cross_entropy", weight_in, 2, "weight");
  const int64_t V = weight_in.size(0), C = weight_in.size(1);
  LT_CHECK(hidden_in.dim() >= 1 && hidden_in.size(-1) == C && V > 0,
           "linear_cross_entropy: hidden " + shape_str(hidden_in.shape()) + " and weight " +
               shape_str(weight_in.shape()),
           "the weight is [V, C] and the hidden rows [..., C]", "pass the head's weight in its [out, in] layout");
  const int64_t N = hidden_in.numel() / C;
  LT_CHECK(targets_in.numel() == N && (targets_in.dtype() == DType::I64 || targets_in.dtype() == DType::I32),
           std::string("linear_cross_entropy: targets are ") + dtype_name(targets_in.dtype()) + " " +
               shape_str(targets_in.shape()),
           std::to_string(N) + " hidden rows need " + std::to_string(N) + " i64 targets",
           "pass one class index per row");
  LT_CHECK(chunk >= 0, "linear_cross_entropy: chunk " + std::to_string(chunk), "it is a number of rows",
           "pass 0 (automatic) or a positive number of rows");
  Tensor targets = contiguous_data(cast(targets_in, DType::I64));
  int64_t count = N;
  if (!dev.is_meta()) {
    count = 0;
    for (int64_t t : read_indices(targets)) {
      if (t == ignore_index) continue;
      LT_CHECK(t >= 0 && t < V, "linear_cross_entropy: target " + std::to_string(t) + " is out of range",
               "there are " + std::to_string(V) + " classes and ignore_index is " + std::to_string(ignore_index),
               "check the labels against the vocabulary size");
      ++count;
    }
  }
  Tensor hidden = contiguous(hidden_in), weight = contiguous(weight_in);  // recorded: gradients flow back
  const DType dt = hidden.dtype(), aux = aux_dtype(dt);
  const bool eager = reduction != Reduction::None && dt != DType::F16 && needs_grad({hidden, weight}) &&
                     knob_on("LEANTRAIN_LOSS_CHUNK_EAGER");
  const int64_t ld = padded_row_stride(V, dt);
  const int64_t rows_per = chunk_rows(chunk, N, ld);
  Backend& be = backend_for(dev);
  Tensor rows = Tensor::empty({N}, aux, dev);
  Tensor lse = Tensor::empty({N}, aux, dev);
  if (!eager) {
    Tensor buf = empty_rows({rows_per, V}, ld, dt, dev);  // one chunk's logits, reused
    for (int64_t r0 = 0; r0 < N; r0 += rows_per) {
      const int64_t n = std::min(rows_per, N - r0);
      Tensor logits = chunk_logits(be, buf, hidden, weight, r0, n, V, C, ld);
      be.cross_entropy_fwd(row_slice(rows, r0, n), row_slice(lse, r0, n), logits, row_slice(targets, r0, n),
                           ignore_index);
    }
  }
  const double inv = loss_scale(reduction, count);
  const bool need_h = hidden.requires_grad(), need_w = weight.requires_grad();
  const Shape hs = hidden_in.shape();
  if (eager) {
    // Each chunk, as the backward below would with a gradient of 1: the loss and dlogits in one pass
    // over the logits (in place), then dHidden rows and dW (accumulated in W's dtype, chunk by chunk
    // as there).
    auto grads = std::make_shared<std::pair<Tensor, Tensor>>(head_gradients(
        be, hidden, weight, need_h, need_w, hs, N, rows_per, V, C, ld, dt, dev,
        [&](const Tensor& logits, int64_t r0, int64_t n) {
          be.cross_entropy_fwd_bwd(row_slice(rows, r0, n), row_slice(lse, r0, n), logits, row_slice(targets, r0, n),
                                   ignore_index, float(inv));
        }));
    Tensor out = reduce_loss_rows(rows, targets_in.shape(), reduction, inv);
    record(out, "linear_cross_entropy", {hidden, weight}, [=](const Tensor& g) {
      // Moved out: the node no longer holds them once the engine has passed them on.
      Tensor dh = std::move(grads->first), dw = std::move(grads->second);
      LT_CHECK(dh.defined() || dw.defined(), "linear_cross_entropy: the eager gradients were taken twice",
               "its backward ran a second time", "run backward once per forward (retain_graph is not supported here)");
      // As cross_entropy's in-place loss: loss.backward()'s seed of ones multiplies nothing; any
      // other gradient scales the rows in place (f32 scalar, rounded once per element).
      if (!is_backward_seed(g)) {
        Backend& b = backend_of(g);
        const Tensor s = contiguous_data(g);
        if (dh.defined()) b.scale_rows(make_view(dh, {N, C}, {C, 1}, dh.offset()), s);
        if (dw.defined()) b.scale_rows(dw, s);
      }
      return std::vector<Tensor>{dh, dw};
    });
    return out;
  }
  // None: the rows themselves, shaped as the targets (0 where ignored).
  Tensor out = reduce_loss_rows(rows, targets_in.shape(), reduction, inv);
  if (!needs_grad({hidden, weight})) return out;
  SavedTensor saved_h(hidden), saved_w(weight), saved_lse(lse), saved_t(make_view(targets, {N}, {1}, targets.offset()));
  record(out, "linear_cross_entropy", {hidden, weight}, [=](const Tensor& g) {
    Tensor sh = saved_h.unpack(), sw = saved_w.unpack(), slse = saved_lse.unpack(), st = saved_t.unpack();
    Backend& b = backend_of(g);
    const Device d = g.device();
    Tensor gc = contiguous_data(g);
    Tensor dloss = gc;  // Reduction::None: one gradient per row already
    if (reduction != Reduction::None) {
      Tensor gs = Tensor::empty({}, gc.dtype(), d);  // the scalar gradient times 1/count, per row
      b.unary(UnaryOp::Scale, gs, gc, float(inv));
      dloss = Tensor::empty({N}, gc.dtype(), d);
      b.copy(dloss, expand_view(gs, {N}));
    }
    auto [dh, dw] = head_gradients(b, sh, sw, need_h, need_w, hs, N, rows_per, V, C, ld, dt, d,
                                   [&](const Tensor& dlogits, int64_t r0, int64_t n) {
                                     // In place: the kernel reads and writes each element in one thread.
                                     b.cross_entropy_bwd(dlogits, row_slice(dloss, r0, n), dlogits, row_slice(slse, r0, n),
                                                         row_slice(st, r0, n), ignore_index);
                                   });
    return std::vector<Tensor>{dh, dw};
  });
  return out;
}

}  // namespace lt
