#include "ops/op_common.h"

#include <cstring>
#include <string>

#include "core/knobs.h"

namespace lt::detail {

Device common_device(const char* op, const std::vector<Tensor>& xs) {
  Device d;
  bool have = false;
  for (const Tensor& x : xs) {
    if (!x.defined()) continue;
    if (!have) { d = x.device(); have = true; continue; }
    LT_CHECK(x.device() == d, std::string(op) + ": inputs are on different devices",
             "got " + d.str() + " and " + x.device().str(), "move them to one device with .to()");
  }
  LT_ASSERT(have);
  return d;
}

void check_same_dtype(const char* op, const Tensor& a, const Tensor& b) {
  LT_CHECK(a.dtype() == b.dtype(), std::string(op) + ": dtype mismatch",
           std::string("got ") + dtype_name(a.dtype()) + " and " + dtype_name(b.dtype()), "cast one with .to(dtype)");
}

void check_floating(const char* op, const Tensor& x) {
  LT_CHECK(is_floating(x.dtype()), std::string(op) + ": needs a floating tensor",
           std::string("got ") + dtype_name(x.dtype()), "cast to f32, bf16 or f16");
}

void check_key_padding_mask(const char* op, const Tensor& mask, int64_t B, int64_t Tk) {
  if (!mask.defined()) return;
  LT_CHECK(mask.dtype() == DType::U8 && mask.shape() == Shape({B, Tk}),
           std::string(op) + ": key_padding_mask is " + dtype_name(mask.dtype()) + " " + shape_str(mask.shape()),
           "it must be u8 [B, Tk] = [" + std::to_string(B) + ", " + std::to_string(Tk) + "] with 1 = attend",
           "build it from the attention mask as u8");
}

void check_rank(const char* op, const Tensor& x, int64_t rank, const char* name) {
  LT_CHECK(x.dim() == rank, std::string(op) + ": " + name + " must have " + std::to_string(rank) + " dimensions",
           "got shape " + shape_str(x.shape()), "reshape it");
}

Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b) {
  size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    LT_CHECK(da == db || da == 1 || db == 1, std::string(op) + ": shapes do not broadcast",
             shape_str(a) + " vs " + shape_str(b), "make trailing dimensions equal or 1");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Tensor expand_view(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  size_t r = shape.size(), xr = x.shape().size();
  LT_ASSERT(xr <= r);
  Shape strides(r, 0);
  for (size_t i = 0; i < xr; ++i) {
    size_t o = i + (r - xr);
    strides[o] = x.shape()[i] == 1 && shape[o] != 1 ? 0 : x.strides()[i];
  }
  return make_view(x, shape, strides, x.offset());
}

Tensor contiguous_data(const Tensor& x) {
  if (x.is_contiguous()) return x;
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  backend_of(x).copy(out, x);
  return out;
}

Tensor column_view(const Tensor& x, int64_t f, int64_t col) {
  const int64_t w = x.size(-1), n = w == 0 ? 0 : x.numel() / w;
  return make_view(x, {n, f}, {w, 1}, x.offset() + col);
}

Tensor rows_view(const Tensor& x) {
  LT_ASSERT(x.is_contiguous() && x.dim() >= 1);
  const int64_t last = x.size(-1);
  const int64_t rows = last == 0 ? 0 : x.numel() / last;
  return make_view(x, {rows, last}, {last, 1}, x.offset());
}

namespace {

// ld when x is in rows of ld (see op_common.h), else 0.
int64_t row_stride(const Tensor& x) {
  if (x.dim() == 0) return 0;
  const int64_t last = x.size(-1);
  if (x.is_contiguous()) return last;
  const Shape& sh = x.shape();
  const Shape& st = x.strides();
  const size_t r = sh.size();
  if (sh[r - 1] != 1 && st[r - 1] != 1) return 0;
  // The row stride: that of the innermost leading dim of size > 1 (none: a single row, packed).
  int64_t ld = 0;
  for (size_t i = r - 1; i-- > 0;)
    if (sh[i] != 1) { ld = st[i]; break; }
  if (ld == 0) return last;
  if (ld < last) return 0;
  int64_t expect = ld;
  for (size_t i = r - 1; i-- > 0;) {
    if (sh[i] == 1) continue;
    if (st[i] != expect) return 0;
    expect *= sh[i];
  }
  return ld;
}

}  // namespace

int64_t padded_rows(const Tensor& x) {
  const int64_t ld = row_stride(x);
  if (ld == 0) return 0;
  const int64_t last = x.size(-1);
  return ld == last || ld == padded_row_stride(last, x.dtype()) ? ld : 0;
}

int64_t padded_row_stride(int64_t width, DType dtype) {
  const int64_t vec = std::max<int64_t>(1, 16 / int64_t(dtype_size(dtype)));
  const int64_t ld = (width + vec - 1) / vec * vec;
  return ld != width && (ld - width) * 64 <= width ? ld : width;
}

Tensor empty_rows(const Shape& shape, int64_t ld, DType dtype, Device device) {
  if (shape.empty() || ld == shape.back() || numel(shape) == 0) return Tensor::empty(shape, dtype, device);
  LT_ASSERT(ld > shape.back());
  Shape full = shape;
  full.back() = ld;
  Tensor buf = Tensor::empty(full, dtype, device);
  return rows_reshape_view(buf, shape, ld);
}

Tensor rows_reshape_view(const Tensor& x, const Shape& shape, int64_t ld) {
  LT_ASSERT(!shape.empty() && ld >= shape.back());
  Shape padded = shape;
  padded.back() = ld;
  Shape strides = contiguous_strides(padded);
  strides.back() = 1;
  return make_view(x, shape, strides, x.offset());
}

void check_doc_pos_values(const std::string& op, const Tensor& d) {
  LT_ASSERT(d.is_contiguous() && d.dtype() == DType::I32 && d.dim() == 2);
  if (d.device().is_meta()) return;
  const int32_t* p = nullptr;
  if (d.device().is_cpu()) {
    p = d.data<int32_t>();
  } else if (const auto& host = d.storage()->host_copy) {
    const int64_t at = d.offset() * 4;
    LT_ASSERT(at >= 0 && at + d.numel() * 4 <= int64_t(host->size()));
    p = reinterpret_cast<const int32_t*>(host->data() + at);
  }
  if (!p) return;
  const int64_t B = d.size(0), T = d.size(1);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int32_t x = p[b * T + t], want = t == 0 ? 0 : p[b * T + t - 1] + 1;
      LT_CHECK(x == 0 || x == want,
               op + ": doc_pos[" + std::to_string(b) + ", " + std::to_string(t) + "] = " + std::to_string(x) +
                   " is neither 0 (a document start) nor " + std::to_string(want) + " (the token before + 1)",
               "each document's positions run 0, 1, 2, ... and a row starts with a document (0)",
               "restart at 0 at each document start and count up by one");
    }
}

std::vector<int64_t> read_indices(const Tensor& ids) {
  LT_ASSERT(ids.is_contiguous() && (ids.dtype() == DType::I64 || ids.dtype() == DType::I32));
  if (ids.device().is_meta()) return {};
  const int64_t n = ids.numel();
  std::vector<int64_t> out(static_cast<size_t>(n));
  // A loader's batch: its uploaded bytes, read here without a device synchronisation.
  if (const auto& host = ids.storage()->host_copy) {
    const int64_t es = int64_t(dtype_size(ids.dtype())), at = ids.offset() * es;
    LT_ASSERT(at >= 0 && at + n * es <= int64_t(host->size()));
    const char* p = host->data() + at;
    if (ids.dtype() == DType::I64) {
      std::memcpy(out.data(), p, size_t(n) * sizeof(int64_t));
    } else {
      for (int64_t i = 0; i < n; ++i) {
        int32_t v;
        std::memcpy(&v, p + i * 4, 4);
        out[size_t(i)] = v;
      }
    }
    return out;
  }
  if (ids.dtype() == DType::I64) {
    backend_of(ids).copy_to_host(out.data(), ids);
  } else {
    std::vector<int32_t> tmp(static_cast<size_t>(n));
    backend_of(ids).copy_to_host(tmp.data(), ids);
    for (int64_t i = 0; i < n; ++i) out[size_t(i)] = tmp[size_t(i)];
  }
  return out;
}

namespace {

bool f32_weight_grads_on() {
  static const bool on = knob_on("LEANTRAIN_F32_WEIGHT_GRADS");
  return on;
}

}  // namespace

ParamGradTargets param_grad_targets(const Tensor& w, const Tensor& bias) {
  const bool need_w = w.requires_grad(), need_b = bias.defined() && bias.requires_grad();
  if ((need_w || need_b) && f32_weight_grads_on()) {
    const Tensor w32 = need_w ? past_f32_cast(w) : Tensor(), b32 = need_b ? past_f32_cast(bias) : Tensor();
    if (need_w == w32.defined() && need_b == b32.defined()) return {need_w ? w32 : w, need_b ? b32 : bias, DType::F32};
  }
  return {w, bias, w.dtype()};
}

Tensor column_sums(const Tensor& g2_in, DType dtype) {
  const int64_t n = g2_in.size(-1);
  if (dtype == g2_in.dtype()) return sum_to(g2_in, {n});
  const Tensor g2 = contiguous(g2_in);  // a copy only for a strided view
  Tensor out = Tensor::empty({n}, dtype, g2.device());
  backend_of(g2).reduce_sum(make_view(out, {1, n}, {n, 1}, out.offset()), make_view(g2, {g2.numel() / n, n}, {n, 1}, g2.offset()));
  return out;
}

double loss_scale(Reduction reduction, int64_t count) {
  return reduction == Reduction::Mean ? 1.0 / double(std::max<int64_t>(count, 1)) : 1.0;
}

Tensor reduce_loss_rows(const Tensor& rows, const Shape& row_shape, Reduction reduction, double scale) {
  if (reduction == Reduction::None) return make_view(rows, row_shape, contiguous_strides(row_shape), 0);
  Backend& be = backend_of(rows);
  Tensor total = Tensor::empty({1}, rows.dtype(), rows.device());
  be.reduce_sum(total, rows);
  Tensor out = Tensor::empty({}, rows.dtype(), rows.device());
  be.unary(UnaryOp::Scale, out, total, float(scale));
  return out;
}

}  // namespace lt::detail
