// Per-head RMSNorm of a packed projection (Qwen3's and Gemma 3's q_norm / k_norm over q | k | v):
// each head of D columns is one rms_norm row, so the op equals slicing the heads out, normalising
// them and concatenating them back, without those copies. x is read in place when its rows have
// one stride (the projection's output, padded rows or a column slice too) and saved as that view;
// the backward writes the whole gradient of x (the passthrough columns copy dy). The weights'
// gradients come from the kernel in parts of rows, added here (no atomics, one order).
#include <algorithm>

#include "core/knobs.h"
#include "memory/host_allocators.h"
#include "ops/op_common.h"

namespace lt {
using namespace detail;

namespace {

// How many parts a weight's gradient is summed in: about 256 head rows each, at most 4096 parts
// (a Qwen3 step normalises ~10^6 head rows per layer; the [P, D] f32 parts are a few MB at most).
int64_t head_norm_dw_parts(int64_t rows) { return std::max<int64_t>(1, std::min<int64_t>(4096, (rows + 255) / 256)); }

// x's rows [N, W] as the kernels read them: in place when x has unit stride along its last dim and
// its leading dims pack rows of one stride, else a (recorded) contiguous copy.
Tensor rows_in_place(const Tensor& x_in, int64_t N) {
  bool rows_ok = x_in.strides().back() == 1;
  for (int64_t i = 0; i + 2 < x_in.dim() && rows_ok; ++i)
    rows_ok = x_in.size(i) == 1 || x_in.strides()[size_t(i)] == x_in.strides()[size_t(i + 1)] * x_in.size(i + 1);
  // A size-1 row dim's stride is arbitrary: it cannot give the row stride of a second row.
  if (!rows_ok || (x_in.dim() >= 2 && x_in.size(-2) == 1 && N > 1)) return contiguous(x_in);
  return x_in;
}

// The [D] gradient of a weight from its [P, D] parts (A), in `dtype`: the parts added in order.
Tensor sum_parts(Backend& be, const Tensor& parts, DType dtype) {
  const int64_t D = parts.size(1);
  const Device dev = parts.device();
  if (dtype == parts.dtype()) {
    Tensor dw = Tensor::empty({D}, dtype, dev);
    be.reduce_sum(make_view(dw, {1, D}, {D, 1}, dw.offset()), parts);
    return dw;
  }
  Tensor s = Tensor::empty({1, D}, parts.dtype(), dev);
  be.reduce_sum(s, parts);
  Tensor dw = Tensor::empty({D}, dtype, dev);
  be.copy(dw, make_view(s, {D}, {1}, s.offset()));
  return dw;
}

}  // namespace

Tensor rms_norm_heads(const Tensor& x_in, const Tensor& wa_in, int64_t ha, const Tensor& wb_in, int64_t hb, double eps,
                      bool unit_offset) {
  const char* name = "rms_norm_heads";
  const float w_offset = unit_offset ? 1.0f : 0.0f;
  OpNameScope op(name);
  const Device dev = common_device(name, {x_in, wa_in, wb_in});
  check_floating(name, x_in);
  LT_CHECK(wa_in.defined() && wb_in.defined(), std::string(name) + ": a weight is missing",
           "each group of heads is scaled by its own [D] weight", "pass ones([D]) (zeros with unit_offset) for none");
  check_same_dtype(name, x_in, wa_in);
  check_same_dtype(name, x_in, wb_in);
  check_rank(name, wa_in, 1, "wa [D]");
  check_rank(name, wb_in, 1, "wb [D]");
  const int64_t D = wa_in.size(0);
  LT_CHECK(D > 0 && wb_in.size(0) == D,
           std::string(name) + ": weights " + shape_str(wa_in.shape()) + " and " + shape_str(wb_in.shape()),
           "both weights are [D] for one head dim D > 0", "pass the q_norm and k_norm weights of one head dim");
  LT_CHECK(ha >= 0 && hb >= 0, std::string(name) + ": " + std::to_string(ha) + " and " + std::to_string(hb) + " heads",
           "a head count cannot be negative", "pass the numbers of query and key heads");
  const int64_t W = x_in.dim() >= 1 ? x_in.size(-1) : 0;
  LT_CHECK(W > 0 && ha <= W / D && hb <= W / D - ha,
           std::string(name) + ": x " + shape_str(x_in.shape()) + " for " + std::to_string(ha) + " + " +
               std::to_string(hb) + " heads of " + std::to_string(D),
           "the last dim must hold the (ha + hb) * D normalised columns (and any passthrough ones after them)",
           "pass the packed projection [..., (ha + hb + rest heads) * D] with the head counts of its layout");
  // LEANTRAIN_NORM_HEADS_CUDA=0: CUDA (or a plan of a CUDA run) composes the op from rms_norm on
  // head copies, as before the per-head kernels (kept for comparison).
  const bool on_cuda = dev.is_cuda() || (dev.is_meta() && meta_simulates_cuda());
  if (on_cuda && !knob_on("LEANTRAIN_NORM_HEADS_CUDA")) {
    Shape lead = x_in.shape();
    lead.pop_back();
    const int64_t last = x_in.dim() - 1;
    auto normed = [&](const Tensor& w, int64_t start, int64_t n) {
      Shape heads = lead, flat = lead;
      heads.push_back(n), heads.push_back(D), flat.push_back(n * D);
      const Tensor h = reshape(contiguous(slice(x_in, last, start, start + n * D)), heads);
      return reshape(rms_norm(h, w, eps, unit_offset), flat);
    };
    std::vector<Tensor> parts;
    if (ha > 0) parts.push_back(normed(wa_in, 0, ha));
    if (hb > 0) parts.push_back(normed(wb_in, ha * D, hb));
    if (W > (ha + hb) * D) parts.push_back(slice(x_in, last, (ha + hb) * D, W));
    return parts.size() == 1 ? parts[0] : concat(parts, last);
  }
  const Tensor wa = contiguous(wa_in), wb = contiguous(wb_in);
  const int64_t N = x_in.numel() / W, H = ha + hb;
  const Tensor x = rows_in_place(x_in, N);
  const int64_t xs = N > 1 ? x.strides()[size_t(x.dim() - 2)] : W;  // one row: its stride is no row's
  const DType acc = aux_dtype(x.dtype());
  Tensor y = Tensor::empty(x.shape(), x.dtype(), dev);
  Tensor rstd = Tensor::empty({N * H}, acc, dev);
  backend_for(dev).rmsnorm_heads_fwd(rows_view(y), rstd, make_view(x, {N, W}, {xs, 1}, x.offset()), wa, wb, ha, hb, D,
                                     float(eps), w_offset);
  if (!needs_grad({x, wa, wb})) return y;
  const bool need_x = x.requires_grad(), need_wa = wa.requires_grad(), need_wb = wb.requires_grad();
  SavedTensor saved_x(x), saved_wa(wa), saved_wb(wb), saved_rstd(rstd);
  // f32 dw under autocast, each weight as rms_norm would give it.
  const ParamGradTargets ta = param_grad_targets(wa, Tensor()), tb = param_grad_targets(wb, Tensor());
  const DType dta = ta.dtype, dtb = tb.dtype;
  const Shape shape = x.shape();
  record(y, name, {x, ta.w, tb.w}, [=](const Tensor& g) {
    const Tensor sx = saved_x.unpack(), swa = saved_wa.unpack(), swb = saved_wb.unpack(), sr = saved_rstd.unpack();
    const Device gd = g.device();
    Backend& be = backend_for(gd);
    Tensor dx = Tensor::empty(shape, sx.dtype(), gd);
    const int64_t P = head_norm_dw_parts(N * std::max(ha, hb));
    Tensor pa = need_wa ? Tensor::empty({P, D}, acc, gd) : Tensor();
    Tensor pb = need_wb ? Tensor::empty({P, D}, acc, gd) : Tensor();
    const Tensor x2 = make_view(sx, {N, W}, {xs, 1}, sx.offset());
    be.rmsnorm_heads_bwd(rows_view(dx), pa, pb, rows_view(contiguous_data(g)), x2, swa, swb, sr, ha, hb, D, w_offset);
    return std::vector<Tensor>{need_x ? dx : Tensor(), need_wa ? sum_parts(be, pa, dta) : Tensor(),
                               need_wb ? sum_parts(be, pb, dtb) : Tensor()};
  });
  return y;
}

}  // namespace lt
