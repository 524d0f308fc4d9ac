// A tensor's bytes on the host, in row-major order: bitwise comparisons of two kernels' results.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "leantrain/ops.h"

namespace lt::test {

inline std::vector<uint8_t> bytes_of(const Tensor& t) {
  Tensor h = contiguous(t).to(Device::cpu());
  std::vector<uint8_t> b(size_t(h.numel()) * dtype_size(h.dtype()));
  if (!b.empty()) std::memcpy(b.data(), h.raw_data(), b.size());
  return b;
}

}  // namespace lt::test
