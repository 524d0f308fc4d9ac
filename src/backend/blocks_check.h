// Argument checks of gather_blocks and scatter_add_blocks (backend_ops.def), shared by the CPU
// and CUDA backends so that both refuse the same calls with the same one-line errors. Only
// shapes, dtypes and devices: the values of the table and of its inverse live on the device;
// the CPU backend checks them too, the CUDA kernels trust the front-end that built them.
#pragma once
#include <cstdint>
#include <string>

#include "leantrain/error.h"
#include "leantrain/shape.h"
#include "leantrain/tensor.h"

namespace lt::blocks {

// Sizes of one call: x or dx [B, T, W] with T = n * bs; table [R, L]; out or dout [B, R, L, bs, W].
struct Dims {
  int64_t B, T, W, n, R, L, bs;
  // Batch and time strides of x (dx), in elements.
  int64_t sb, st;
};

// x (or dx) [B, T, W] with unit stride on W, cut into n blocks of bs rows.
inline Dims check_rows(const char* op, const char* name, const Tensor& x, int64_t bs) {
  LT_CHECK(x.defined() && x.dim() == 3, std::string(op) + ": " + name + " must be a [B, T, W] tensor",
           "the op moves blocks of rows of a sequence", "");
  LT_CHECK(x.strides()[2] == 1 || x.size(2) <= 1,
           std::string(op) + ": " + name + " " + shape_str(x.shape()) + " has stride " +
               std::to_string(x.strides()[2]) + " on W",
           "each row is moved as one span", "make the last dim contiguous");
  LT_CHECK(bs > 0 && x.size(1) % bs == 0,
           std::string(op) + ": " + name + " has " + std::to_string(x.size(1)) + " rows, block size " +
               std::to_string(bs),
           "the rows must split into whole blocks", "pad T to a multiple of the block size");
  return Dims{x.size(0), x.size(1), x.size(2), x.size(1) / bs, 0, 0, bs, x.strides()[0], x.strides()[1]};
}

// out or dout: contiguous [B, R, L, bs, W] of x's dtype, on x's device.
inline void check_blocks(const char* op, const char* name, const Tensor& t, const Tensor& x, const Dims& d) {
  const Shape want{d.B, d.R, d.L, d.bs, d.W};
  LT_CHECK(t.defined() && t.shape() == want && t.is_contiguous() && t.dtype() == x.dtype() &&
               t.device() == x.device(),
           std::string(op) + ": " + name + " is " + (t.defined() ? dtype_name(t.dtype()) : "undefined") + " " +
               (t.defined() ? shape_str(t.shape()) : "") + ", expected a contiguous " + dtype_name(x.dtype()) +
               " " + shape_str(want) + " on " + x.device().str(),
           "one [bs, W] block per table entry", "");
}

// A contiguous i32 index tensor on x's device.
inline void check_index(const char* op, const char* name, const Tensor& t, const Tensor& x, int64_t dim) {
  LT_CHECK(t.defined() && t.dtype() == DType::I32 && t.dim() == dim && t.is_contiguous() && t.device() == x.device(),
           std::string(op) + ": " + name + " must be a contiguous i32 tensor of rank " + std::to_string(dim) + " on " +
               x.device().str(),
           "the kernel reads it directly", "");
}

inline Dims check_gather(const Tensor& out, const Tensor& x, const Tensor& table, int64_t bs) {
  Dims d = check_rows("gather_blocks", "x", x, bs);
  check_index("gather_blocks", "table", table, x, 2);
  d.R = table.size(0);
  d.L = table.size(1);
  check_blocks("gather_blocks", "out", out, x, d);
  return d;
}

inline Dims check_scatter(const Tensor& dx, const Tensor& dout, const Tensor& inv_offsets, const Tensor& inv_entries,
                          int64_t bs) {
  Dims d = check_rows("scatter_add_blocks", "dx", dx, bs);
  LT_CHECK(is_floating(dx.dtype()), std::string("scatter_add_blocks: dtype ") + dtype_name(dx.dtype()),
           "the sums need a floating dtype", "use f32, f64, bf16 or f16");
  LT_CHECK(dout.defined() && dout.dim() == 5,
           "scatter_add_blocks: dout must be a [B, R, L, bs, W] tensor", "it holds one block per table entry", "");
  d.R = dout.size(1);
  d.L = dout.size(2);
  check_blocks("scatter_add_blocks", "dout", dout, dx, d);
  check_index("scatter_add_blocks", "inv_offsets", inv_offsets, dx, 1);
  check_index("scatter_add_blocks", "inv_entries", inv_entries, dx, 1);
  LT_CHECK(inv_offsets.numel() == d.n + 1,
           "scatter_add_blocks: inv_offsets has " + std::to_string(inv_offsets.numel()) + " entries for " +
               std::to_string(d.n) + " blocks",
           "a CSR list has n + 1 offsets", "");
  return d;
}

}  // namespace lt::blocks
