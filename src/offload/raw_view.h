// A CPU tensor over memory the offload code manages itself (the drained-gradient area, a bucket,
// a scratch buffer, a window or mapping of --offload-dir's file): it owns nothing.
#pragma once
#include <memory>

#include "leantrain/memory.h"
#include "leantrain/tensor.h"

namespace lt::offload {

inline Tensor raw_view(void* ptr, const Shape& shape, DType dt) {
  Block b;
  b.ptr = ptr;
  b.size = b.requested = numel(shape) * int64_t(dtype_size(dt));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(b, nullptr, Device::cpu());
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dt;
  impl->device = Device::cpu();
  return Tensor(impl);
}

}  // namespace lt::offload
