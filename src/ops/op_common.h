// Shared by the op front-ends: input validation and output allocation.
#pragma once
#include <string>
#include <vector>

#include "backend/backend.h"
#include "leantrain/autograd.h"
#include "leantrain/error.h"
#include "leantrain/ops.h"

namespace lt::detail {

// All defined inputs on one device; returns it.
Device common_device(const char* op, const std::vector<Tensor>& xs);
void check_same_dtype(const char* op, const Tensor& a, const Tensor& b);
void check_floating(const char* op, const Tensor& x);
void check_rank(const char* op, const Tensor& x, int64_t rank, const char* name);
// An attention's key padding mask: undefined, or u8 [B, Tk] with 1 = attend.
void check_key_padding_mask(const char* op, const Tensor& mask, int64_t B, int64_t Tk);
// Packed documents' positions (AttentionMask::doc_pos, nn::TokenMask::doc_pos), contiguous i32
// [B, T]: each row starts a document (0) and counts up by one until the next 0. Checked where the
// values sit on the host without a device synchronisation (a CPU tensor, or a loader batch's kept
// bytes, Storage::host_copy); a GPU tensor without them is the caller's duty (a copy and a
// synchronisation per layer would cost more than the check is worth). Nothing on meta.
void check_doc_pos_values(const std::string& op, const Tensor& doc_pos);
// NumPy broadcasting of two shapes; throws with both shapes on mismatch.
Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b);
// A broadcast view of x as `shape` (stride 0 on expanded dims), for the kernels.
Tensor expand_view(const Tensor& x, const Shape& shape);
// Materialises a contiguous copy if needed (not recorded: for kernels' inputs).
Tensor contiguous_data(const Tensor& x);

inline Backend& backend_of(const Tensor& t) { return backend_for(t.device()); }

// Dtype of auxiliary statistics (mean, rstd, lse, per-row loss): f32, or f64 for f64 inputs.
inline DType aux_dtype(DType t) { return t == DType::F64 ? DType::F64 : DType::F32; }
// A contiguous view of x as [numel / last, last] (row-wise kernels take 2-D operands).
Tensor rows_view(const Tensor& x);
// [N, f] view of the f columns of a contiguous [..., W] tensor that start `col` into each row.
Tensor column_view(const Tensor& x, int64_t f, int64_t col);

// Records out = op(xc) (xc contiguous) for autograd: its backward is dy * op'(x), saving xc
// (unless op is linear). The unary ops' front-ends and linear_gelu's GELU node share it.
void record_unary(UnaryOp op, const char* name, Tensor& out, const Tensor& xc, float alpha);
// Records out as x cast to out's dtype (both floating): the backward casts the gradient back. A
// cast from f32 is marked so that past_f32_cast may route a consumer's f32 gradient around it.
void record_cast(Tensor& out, const Tensor& x);

// Padded rows. A tensor "in rows of ld" has stride 1 along its last dim and every leading dim
// packed over rows that start ld elements apart (strides [..., r*ld, ld, 1], ld >= the last
// size n): a contiguous tensor (ld = n), or a [..., n] view of a [..., ld] allocation.
//
// The row stride linear gives an output of `width` features: rounded up to a multiple of 16
// bytes when the width is not one and the padding adds at most 1/64 to the row (wide, odd
// outputs: GPT-2's 50257 logits get rows of 50264, so every GEMM operand stays 16-byte aligned
// and cuBLASLt keeps its fast kernels); else the width itself. It depends on the shape and the
// dtype only, never on the device, so every backend allocates the same bytes.
int64_t padded_row_stride(int64_t width, DType dtype);
// x's row stride when x is contiguous or in the padded rows padded_row_stride gives its width;
// 0 for any other layout (a slice's rows stay a strided view: reading it in place would keep
// its whole base alive where a copy would not). The GEMMs (lda/ldb/ldc), cross-entropy and
// reshape take such tensors without a copy; any other op copies a padded tensor first, as it
// does every strided view.
int64_t padded_rows(const Tensor& x);
// An uninitialised tensor of `shape` in rows of ld: a view at the start of a [..., ld]
// allocation (ld == the last size: a plain contiguous tensor).
Tensor empty_rows(const Shape& shape, int64_t ld, DType dtype, Device device);
// A view of x's storage from x's first element, of `shape`, in rows of ld.
Tensor rows_reshape_view(const Tensor& x, const Shape& shape, int64_t ld);
// Host copy of a contiguous i32/i64 index tensor, read without the allocator (so the
// allocation trace is the same on every backend). Empty on meta: there are no values.
std::vector<int64_t> read_indices(const Tensor& ids);

// What an op records as a layer's weight and bias (record()'s inputs) and the dtype its backward
// computes their gradients in (linears, norms). Under autocast both are recorded casts of f32
// parameters: then the stand-ins of past_f32_cast, and f32, so that the kernel that sums the
// gradient writes it in f32 itself (no 16-bit gradient, no cast kernel per parameter, no
// rounding). Otherwise w and bias themselves, in w's dtype. LEANTRAIN_F32_WEIGHT_GRADS=0 keeps
// the casts (to time one against the other).
struct ParamGradTargets {
  Tensor w, b;
  DType dtype = DType::F32;
};
ParamGradTargets param_grad_targets(const Tensor& w, const Tensor& bias);
// The column sums of g2 [rows, n] (a bias gradient) in `dtype`: g2's, or f32 for 16-bit g2.
Tensor column_sums(const Tensor& g2, DType dtype);
// A loss's factor on its summed rows: 1/count for Mean (an all-ignored batch, count 0, gives loss
// 0 and zero gradients, not 0/0), 1 otherwise.
double loss_scale(Reduction reduction, int64_t count);
// A loss's per-row values `rows` [N] (f32 or f64) as `reduction` asks: None, the rows themselves
// viewed as `row_shape`; otherwise a 0-d tensor, their sum times `scale`.
Tensor reduce_loss_rows(const Tensor& rows, const Shape& row_shape, Reduction reduction, double scale);

}  // namespace lt::detail
