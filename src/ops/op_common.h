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
// Host copy of a contiguous i32/i64 index tensor, read without the allocator (so the
// allocation trace is the same on every backend). Empty on meta: there are no values.
std::vector<int64_t> read_indices(const Tensor& ids);

}  // namespace lt::detail
