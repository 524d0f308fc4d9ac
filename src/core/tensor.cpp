#include "leantrain/tensor.h"

#include "leantrain/error.h"

namespace lt {

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape)
    LT_CHECK(d >= 0, "negative dimension in shape " + shape_str(shape), "sizes must be >= 0", "fix the shape");
  if (dtype == DType::F64 && device.is_cuda())
    fail("f64 is not supported on CUDA", "leantrain keeps f64 for CPU reference checks", "use f32, bf16 or f16");
  return tensor_over(allocate_storage(lt::numel(shape) * int64_t(dtype_size(dtype)), device), 0, shape,
                     contiguous_strides(shape), dtype, device);
}

int64_t Tensor::size(int64_t d) const { return impl_->shape[size_t(wrap_dim(d, dim()))]; }

bool Tensor::is_contiguous() const {
  int64_t expect = 1;
  for (size_t i = impl_->shape.size(); i-- > 0;) {
    if (impl_->shape[i] == 1) continue;
    if (impl_->strides[i] != expect) return false;
    expect *= impl_->shape[i];
  }
  return true;
}

Category Tensor::category() const { return impl_->storage->block.category; }

void* Tensor::raw_data() const {
  void* base = impl_->storage->data();
  if (!base) return nullptr;
  return static_cast<char*>(base) + impl_->offset * int64_t(dtype_size(impl_->dtype));
}

Tensor& Tensor::set_requires_grad(bool on) {
  if (on)
    LT_CHECK(is_floating(dtype()), "cannot require grad of a " + std::string(dtype_name(dtype())) + " tensor",
             "only floating tensors have gradients", "cast to a floating dtype first");
  impl_->requires_grad = on;
  return *this;
}

void Tensor::register_post_accumulate_grad_hook(PostAccumulateGradHook h) {
  LT_CHECK(is_leaf(), "post-accumulate-grad hooks go on leaf tensors", "this tensor was produced by an op",
           "register the hook on the parameter");
  impl_->post_accumulate_grad_hooks.push_back(std::move(h));
}

Tensor Tensor::detach() const {
  return tensor_over(impl_->storage, impl_->offset, impl_->shape, impl_->strides, impl_->dtype, impl_->device);
}

Tensor make_view(const Tensor& base, const Shape& shape, const Shape& strides, int64_t offset) {
  return tensor_over(base.storage(), offset, shape, strides, base.dtype(), base.device());
}

Tensor tensor_over(std::shared_ptr<Storage> storage, int64_t offset, const Shape& shape, const Shape& strides,
                   DType dtype, Device device) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->offset = offset;
  impl->shape = shape;
  impl->strides = strides;
  impl->dtype = dtype;
  impl->device = device;
  return Tensor(std::move(impl));
}

}  // namespace lt
