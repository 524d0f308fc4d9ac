// The gated RMSNorm of Gated DeltaNet's output (transformers' Qwen3_5RMSNormGated): each group of
// D = w.size(0) columns normalised, scaled by w and multiplied by silu(z). It saves x, z (read in
// place: a view of the z projection's output) and the f32 rstd per group; the weight's gradient
// is summed by the kernel in parts of rows and the parts added here (no atomics, one order).
#include "ops/op_common.h"

namespace lt {
using namespace detail;

namespace {

// How many parts the weight's gradient is summed in: about 256 rows each, at most 1024 parts.
int64_t dw_parts_for(int64_t rows) { return std::max<int64_t>(1, std::min<int64_t>(1024, (rows + 255) / 256)); }

}  // namespace

Tensor rms_norm_gated(const Tensor& x_in, const Tensor& z_in, const Tensor& w_in, double eps) {
  const char* name = "rms_norm_gated";
  OpNameScope op(name);
  const Device dev = common_device(name, {x_in, z_in, w_in});
  check_floating(name, x_in);
  check_same_dtype(name, x_in, z_in);
  check_same_dtype(name, x_in, w_in);
  check_rank(name, w_in, 1, "w [D]");
  const int64_t D = w_in.size(0);
  LT_CHECK(x_in.dim() >= 1 && x_in.shape() == z_in.shape() && D > 0 && x_in.size(-1) % D == 0,
           std::string(name) + ": x " + shape_str(x_in.shape()) + ", z " + shape_str(z_in.shape()) + ", w " +
               shape_str(w_in.shape()),
           "x and z have one shape whose last dim holds whole groups of the weight's D columns",
           "pass the heads' outputs, their gate and the [head dim] weight");
  const Tensor x = contiguous(x_in), w = contiguous(w_in);
  const int64_t W = x.size(-1), N = x.numel() / W, G = W / D;
  // z read in place when it is [..., W] rows of one stride with unit stride along them, else copied.
  Tensor z = z_in;
  bool rows_ok = z.strides().back() == 1;
  for (int64_t i = 0; i + 2 < z.dim() && rows_ok; ++i)
    rows_ok = z.size(i) == 1 || z.strides()[size_t(i)] == z.strides()[size_t(i + 1)] * z.size(i + 1);
  if (!rows_ok || (z.dim() >= 2 && z.size(-2) == 1 && N > 1)) z = contiguous(z_in);
  const int64_t zs = z.dim() >= 2 ? z.strides()[size_t(z.dim() - 2)] : W;
  const Tensor z2 = make_view(z, {N, W}, {zs, 1}, z.offset());
  const DType acc = aux_dtype(x.dtype());
  Tensor y = Tensor::empty(x.shape(), x.dtype(), dev);
  Tensor rstd = Tensor::empty({N * G}, acc, dev);
  backend_for(dev).rmsnorm_gated_fwd(make_view(y, {N, W}, {W, 1}, 0), rstd, make_view(x, {N, W}, {W, 1}, x.offset()), z2,
                                     w, float(eps));
  if (!needs_grad({x, z, w})) return y;
  SavedTensor saved_x(x), saved_z(z), saved_w(w), saved_rstd(rstd);
  const bool need_w = w.requires_grad();
  record(y, name, {x, z, w}, [=](const Tensor& g) {
    const Tensor sx = saved_x.unpack(), sz = saved_z.unpack(), sw = saved_w.unpack(), sr = saved_rstd.unpack();
    const Device gd = g.device();
    Backend& be = backend_for(gd);
    Tensor dx = Tensor::empty(sx.shape(), sx.dtype(), gd), dz = Tensor::empty(sz.shape(), sz.dtype(), gd);
    // w's partial sums only when w takes a gradient (not a frozen norm under LoRA).
    Tensor parts = need_w ? Tensor::empty({dw_parts_for(N * G), D}, acc, gd) : Tensor();
    const Tensor gc = contiguous_data(g);  // may be a view past its buffer's start (concat's backward)
    be.rmsnorm_gated_bwd(make_view(dx, {N, W}, {W, 1}, 0), make_view(dz, {N, W}, {W, 1}, 0), parts,
                         make_view(gc, {N, W}, {W, 1}, gc.offset()), make_view(sx, {N, W}, {W, 1}, sx.offset()),
                         make_view(sz, {N, W}, {zs, 1}, sz.offset()), sw, sr);
    Tensor dw;
    if (need_w) {
      Tensor s = Tensor::empty({1, D}, acc, gd);
      be.reduce_sum(s, parts);
      dw = Tensor::empty({D}, sw.dtype(), gd);
      be.copy(dw, make_view(s, {D}, {1}, 0));
    }
    return std::vector<Tensor>{dx, dz, dw};
  });
  return y;
}

}  // namespace lt
