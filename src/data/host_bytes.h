// Keeping an upload's bytes on the host (Storage::host_copy): the data loader's batches, and
// leantrain_bench's synthetic ones, so that the embedding's and the loss's checks read token ids
// and labels there instead of waiting for the device mid-step.
#pragma once
#include <memory>
#include <vector>

#include "leantrain/tensor.h"

namespace lt {

// `src` holds the bytes just copied into `dst` (a contiguous device tensor that nothing writes
// afterwards): a copy of them becomes dst's storage's host_copy.
inline void keep_host_bytes(const Tensor& dst, const void* src) {
  const char* p = static_cast<const char*>(src);
  dst.storage()->host_copy = std::make_shared<const std::vector<char>>(p, p + dst.nbytes());
}

}  // namespace lt
