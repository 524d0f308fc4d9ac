// Tensor = shared handle to a TensorImpl (a view: storage + offset + shape + strides + dtype).
// Views share storage; gradients, the producing node and hooks live on the impl.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "leantrain/device.h"
#include "leantrain/dtype.h"
#include "leantrain/memory.h"
#include "leantrain/shape.h"

namespace lt {

struct Node;
class Tensor;
using PostAccumulateGradHook = std::function<void(Tensor& param)>;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements
  Shape shape, strides;
  DType dtype = DType::F32;
  Device device;
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<Node> grad_fn;           // set on outputs of recorded ops
  std::shared_ptr<Node> grad_accumulator;  // leaves that require grad (created lazily)
  std::vector<PostAccumulateGradHook> post_accumulate_grad_hooks;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Allocation in the current MemoryCategoryScope. Contents are unspecified.
  static Tensor empty(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl_->shape; }
  const Shape& strides() const { return impl_->strides; }
  int64_t dim() const { return int64_t(impl_->shape.size()); }
  int64_t size(int64_t d) const;
  int64_t numel() const { return lt::numel(impl_->shape); }
  int64_t offset() const { return impl_->offset; }
  DType dtype() const { return impl_->dtype; }
  Device device() const { return impl_->device; }
  bool is_contiguous() const;
  int64_t nbytes() const { return numel() * int64_t(dtype_size(dtype())); }
  const std::shared_ptr<Storage>& storage() const { return impl_->storage; }
  Category category() const;

  // Pointer to the first element (host pointer on CPU, device pointer on CUDA, nullptr on meta).
  void* raw_data() const;
  template <class T> T* data() const { return static_cast<T*>(raw_data()); }

  // Autograd.
  bool requires_grad() const { return impl_ && impl_->requires_grad; }
  Tensor& set_requires_grad(bool on);
  bool is_leaf() const { return !impl_->grad_fn; }
  Tensor grad() const { return impl_->grad ? Tensor(impl_->grad) : Tensor(); }
  void set_grad(const Tensor& g) { impl_->grad = g.impl_; }
  const std::shared_ptr<Node>& grad_fn() const { return impl_->grad_fn; }
  void register_post_accumulate_grad_hook(PostAccumulateGradHook h);
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;
  Tensor detach() const;  // same storage, no autograd history

  // Conversions and copies (recorded by autograd where differentiable).
  Tensor to(Device d) const;
  Tensor to(DType t) const;
  Tensor contiguous() const;
  Tensor clone() const;

  // Host read-back helpers (copy to the CPU; meta tensors throw).
  std::vector<float> to_float_vector() const;
  std::vector<double> to_double_vector() const;
  std::vector<int64_t> to_int_vector() const;
  double item() const;

  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool same(const Tensor& o) const { return impl_ == o.impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// A view of `base` with another shape/strides/offset (no copy, no autograd record).
Tensor make_view(const Tensor& base, const Shape& shape, const Shape& strides, int64_t offset);

// A tensor over `storage` from element `offset` with the given layout, no autograd state; nothing
// is allocated or checked. A null storage makes a tensor without memory: a stand-in whose shape,
// dtype and device (and whatever backward the caller records on it) are all that is used.
Tensor tensor_over(std::shared_ptr<Storage> storage, int64_t offset, const Shape& shape, const Shape& strides,
                   DType dtype, Device device);

}  // namespace lt
