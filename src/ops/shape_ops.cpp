// Views (reshape of contiguous data or of padded rows, permute, slice, select, expand) share
// storage; their backward maps the gradient back to the input's shape.
#include <algorithm>
#include <numeric>

#include "ops/op_common.h"

namespace lt {
using namespace detail;

Tensor contiguous(const Tensor& x) {
  if (x.is_contiguous()) return x;
  Tensor out = contiguous_data(x);
  record(out, "contiguous", {x}, [](const Tensor& g) { return std::vector<Tensor>{g}; });
  return out;
}

Tensor reshape(const Tensor& x, const Shape& shape_in) {
  Shape shape = shape_in;
  int64_t infer = -1, known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      LT_CHECK(infer < 0, "reshape: more than one -1", "in " + shape_str(shape_in), "leave at most one -1");
      infer = int64_t(i);
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    LT_CHECK(known > 0 && x.numel() % known == 0, "reshape: cannot infer -1",
             shape_str(x.shape()) + " into " + shape_str(shape_in), "fix the target shape");
    shape[size_t(infer)] = x.numel() / known;
  }
  LT_CHECK(numel(shape) == x.numel(), "reshape: element count changes",
           shape_str(x.shape()) + " has " + std::to_string(x.numel()) + ", " + shape_str(shape) + " has " +
               std::to_string(numel(shape)),
           "keep the product of sizes equal");
  Shape in_shape = x.shape();
  // Padded rows (a wide linear's output, op_common.h) keep their rows when the last size stays.
  const int64_t ld = x.is_contiguous() ? 0 : padded_rows(x);
  if (ld > 0 && !shape.empty() && shape.back() == in_shape.back()) {
    Tensor out = rows_reshape_view(x, shape, ld);
    record(out, "reshape", {x}, [in_shape](const Tensor& g) { return std::vector<Tensor>{reshape(g, in_shape)}; });
    return out;
  }
  Tensor src = contiguous(x);
  Tensor out = make_view(src, shape, contiguous_strides(shape), src.offset());
  record(out, "reshape", {src}, [in_shape](const Tensor& g) { return std::vector<Tensor>{reshape(g, in_shape)}; });
  return out;
}

Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  LT_CHECK(int64_t(dims.size()) == x.dim(), "permute: wrong number of dims",
           "tensor has " + std::to_string(x.dim()) + ", got " + std::to_string(dims.size()), "name every dim once");
  Shape shape(dims.size()), strides(dims.size());
  std::vector<bool> seen(dims.size(), false);
  std::vector<int64_t> inverse(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = wrap_dim(dims[i], x.dim());
    LT_CHECK(!seen[size_t(d)], "permute: repeated dim", "dim " + std::to_string(d) + " twice", "name every dim once");
    seen[size_t(d)] = true;
    shape[i] = x.shape()[size_t(d)];
    strides[i] = x.strides()[size_t(d)];
    inverse[size_t(d)] = int64_t(i);
  }
  Tensor out = make_view(x, shape, strides, x.offset());
  record(out, "permute", {x}, [inverse](const Tensor& g) { return std::vector<Tensor>{permute(g, inverse)}; });
  return out;
}

Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  std::vector<int64_t> dims(size_t(x.dim()));
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[size_t(wrap_dim(d0, x.dim()))], dims[size_t(wrap_dim(d1, x.dim()))]);
  return permute(x, dims);
}

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end) {
  int64_t d = wrap_dim(dim, x.dim());
  int64_t n = x.shape()[size_t(d)];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape shape = x.shape();
  shape[size_t(d)] = end - start;
  Tensor out = make_view(x, shape, x.strides(), x.offset() + start * x.strides()[size_t(d)]);
  Shape in_shape = x.shape();
  DType dt = x.dtype();
  record(out, "slice", {x}, [=](const Tensor& g) {
    Tensor full_grad = zeros(in_shape, dt, g.device());
    Shape st = contiguous_strides(in_shape);
    Tensor window = make_view(full_grad, g.shape(), st, start * st[size_t(d)]);
    backend_of(g).copy(window, g);
    return std::vector<Tensor>{full_grad};
  });
  return out;
}

Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  int64_t d = wrap_dim(dim, x.dim());
  int64_t n = x.shape()[size_t(d)];
  LT_CHECK(index >= -n && index < n, "select: index " + std::to_string(index) + " out of range",
           "dim " + std::to_string(d) + " has size " + std::to_string(n), "use an index in range");
  if (index < 0) index += n;
  Tensor s = slice(x, d, index, index + 1);
  Shape shape = x.shape();
  shape.erase(shape.begin() + d);
  Shape strides = s.strides();
  strides.erase(strides.begin() + d);
  Tensor out = make_view(s, shape, strides, s.offset());
  Shape sshape = s.shape();
  record(out, "select", {s}, [sshape](const Tensor& g) {
    Tensor gc = contiguous(g);
    return std::vector<Tensor>{make_view(gc, sshape, contiguous_strides(sshape), gc.offset())};
  });
  return out;
}

Tensor concat(const std::vector<Tensor>& xs, int64_t dim) {
  LT_CHECK(!xs.empty(), "concat: no tensors", "the list is empty", "pass at least one tensor");
  Device dev = common_device("concat", xs);
  int64_t d = wrap_dim(dim, xs[0].dim());
  Shape shape = xs[0].shape();
  int64_t total = 0;
  for (const Tensor& x : xs) {
    check_same_dtype("concat", xs[0], x);
    LT_CHECK(x.dim() == xs[0].dim(), "concat: ranks differ", shape_str(xs[0].shape()) + " vs " + shape_str(x.shape()),
             "concatenate tensors of one rank");
    for (int64_t i = 0; i < x.dim(); ++i)
      LT_CHECK(i == d || x.shape()[size_t(i)] == shape[size_t(i)], "concat: shapes differ off the concat dim",
               shape_str(xs[0].shape()) + " vs " + shape_str(x.shape()), "match every other dimension");
    total += x.shape()[size_t(d)];
  }
  shape[size_t(d)] = total;
  Tensor out = Tensor::empty(shape, xs[0].dtype(), dev);
  Shape st = out.strides();
  int64_t pos = 0;
  std::vector<int64_t> starts;
  for (const Tensor& x : xs) {
    starts.push_back(pos);
    Tensor window = make_view(out, x.shape(), st, pos * st[size_t(d)]);
    backend_for(dev).copy(window, x);
    pos += x.shape()[size_t(d)];
  }
  std::vector<int64_t> sizes;
  for (const Tensor& x : xs) sizes.push_back(x.shape()[size_t(d)]);
  record(out, "concat", xs, [=](const Tensor& g) {
    std::vector<Tensor> grads;
    for (size_t i = 0; i < sizes.size(); ++i) grads.push_back(slice(g, d, starts[i], starts[i] + sizes[i]));
    return grads;
  });
  return out;
}

Tensor expand(const Tensor& x, const Shape& shape) {
  Shape b = broadcast_shapes("expand", x.shape(), shape);
  LT_CHECK(b == shape, "expand: cannot expand " + shape_str(x.shape()) + " to " + shape_str(shape),
           "only size-1 dimensions expand", "fix the target shape");
  // expand_view returns x itself for an equal shape; recording on it would rewrite x's history.
  if (x.shape() == shape) return x;
  Tensor out = expand_view(x, shape);
  Shape in_shape = x.shape();
  record(out, "expand", {x}, [in_shape](const Tensor& g) { return std::vector<Tensor>{sum_to(g, in_shape)}; });
  return out;
}

Tensor cast(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  Tensor out = Tensor::empty(x.shape(), dtype, x.device());
  backend_of(x).copy(out, x);
  if (is_floating(dtype) && is_floating(x.dtype())) record_cast(out, x);
  return out;
}

void detail::record_cast(Tensor& out, const Tensor& x) {
  const DType from = x.dtype();
  record(out, "cast", {x}, [from](const Tensor& g) { return std::vector<Tensor>{cast(g, from)}; });
  if (from == DType::F32 && out.impl()->grad_fn) out.impl()->grad_fn->casts_from_f32 = true;
}

Tensor to_device(const Tensor& x, Device device) {
  if (x.device() == device) return x;
  Tensor out = Tensor::empty(x.shape(), x.dtype(), device);
  copy_(out, x);
  Device from = x.device();
  record(out, "to_device", {x}, [from](const Tensor& g) { return std::vector<Tensor>{to_device(g, from)}; });
  return out;
}

Tensor patchify(const Tensor& images, int64_t p) {
  check_rank("patchify", images, 4, "images");
  const int64_t B = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
  LT_CHECK(p > 0 && H % p == 0 && W % p == 0, "patchify: image " + std::to_string(H) + "x" + std::to_string(W),
           "is not divisible by patch size " + std::to_string(p), "choose a patch size that divides the image");
  Tensor x = reshape(images, {B, C, H / p, p, W / p, p});
  x = permute(x, {0, 2, 4, 1, 3, 5});  // B, H/p, W/p, C, p, p
  return reshape(x, {B, (H / p) * (W / p), C * p * p});
}

}  // namespace lt
