// A CPU tensor over memory leantrain does not own through an allocator: a weight file's mapping,
// a staging buffer, offload's gradient area, buckets and scratch buffers, a window or mapping of
// --offload-dir's file. It owns nothing; the memory must outlive it.
#pragma once
#include <memory>

#include "leantrain/memory.h"
#include "leantrain/tensor.h"

namespace lt {

inline Tensor raw_view(const void* ptr, const Shape& shape, DType dt) {
  Block b;
  b.ptr = const_cast<void*>(ptr);  // a read-only mapping is only ever a copy's source
  b.size = b.requested = numel(shape) * int64_t(dtype_size(dt));
  return tensor_over(std::make_shared<Storage>(b, nullptr, Device::cpu()), 0, shape, contiguous_strides(shape), dt,
                     Device::cpu());
}

}  // namespace lt
