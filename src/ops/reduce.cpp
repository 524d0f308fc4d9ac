#include <algorithm>

#include "ops/op_common.h"

namespace lt {
using namespace detail;

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  // Leading extra dims are summed away; size-1 dims of `shape` are summed with keepdim.
  const size_t lead = x.shape().size() - shape.size();
  LT_ASSERT(x.shape().size() >= shape.size());
  Shape keep_shape = x.shape();
  for (size_t i = 0; i < keep_shape.size(); ++i) {
    if (i < lead) keep_shape[i] = 1;
    else if (shape[i - lead] == 1) keep_shape[i] = 1;
    else LT_ASSERT(shape[i - lead] == x.shape()[i]);
  }
  Tensor xc = contiguous(x);
  Tensor out = Tensor::empty(keep_shape, x.dtype(), x.device());
  backend_of(x).reduce_sum(out, xc);
  Tensor r = make_view(out, shape, contiguous_strides(shape), 0);
  Shape in_shape = x.shape();
  record(r, "sum_to", {xc}, [in_shape](const Tensor& g) { return std::vector<Tensor>{contiguous(expand(g, in_shape))}; });
  return r;
}

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  check_floating("sum", x);
  Shape keep_shape = x.shape();
  std::vector<bool> reduced(size_t(x.dim()), false);
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, x.dim());
    reduced[size_t(w)] = true;
    keep_shape[size_t(w)] = 1;
  }
  Tensor kept = sum_to(x, keep_shape);
  if (keepdim) return kept;
  Shape out_shape;
  for (size_t i = 0; i < keep_shape.size(); ++i)
    if (!reduced[i]) out_shape.push_back(keep_shape[i]);
  return reshape(kept, out_shape);
}

Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  int64_t count = 1;
  for (int64_t d : dims) count *= x.shape()[size_t(wrap_dim(d, x.dim()))];
  return scale(sum(x, dims, keepdim), 1.0 / double(std::max<int64_t>(count, 1)));
}

Tensor sum_all(const Tensor& x) {
  std::vector<int64_t> dims(size_t(x.dim()));
  for (size_t i = 0; i < dims.size(); ++i) dims[i] = int64_t(i);
  return sum(x, dims, false);
}

Tensor mean_all(const Tensor& x) { return scale(sum_all(x), 1.0 / double(std::max<int64_t>(x.numel(), 1))); }

Tensor argmax(const Tensor& x) {
  LT_CHECK(x.dim() >= 1, "argmax: needs at least one dimension", "got a scalar", "pass a tensor");
  Tensor xc = contiguous_data(x);
  Shape shape = x.shape();
  shape.pop_back();
  Tensor out = Tensor::empty(shape, DType::I64, x.device());
  backend_of(x).argmax_lastdim(out, xc);
  return out;
}

}  // namespace lt
