// Multi-tensor launches: one kernel updates many tensors. The host passes a table of pointers,
// sizes, dtypes and chunk prefix sums BY VALUE in the kernel parameters (no device allocation,
// no host-to-device copy); each block walks chunks in a grid-stride loop and finds its tensor by
// binary search. Tables hold up to N tensors; a longer list takes one launch per N tensors.
// Tables are up to ~20 KiB: kernel parameters above 4 KiB need CUDA 12.1+ (we build with 13).
#pragma once
#include <span>
#include <vector>

#include "backend/cuda/cuda_strided.cuh"

namespace lt::cuda {

inline constexpr int64_t kMtChunk = 16384;  // elements per chunk
inline constexpr int kMtThreads = 256;

// P pointer lists (e.g. param, grad, m, v) of up to N tensors.
template <int P, int N> struct MtTable {
  void* ptr[P][N];
  int64_t numel[N];
  int64_t first_chunk[N + 1];  // chunk c belongs to tensor t when first_chunk[t] <= c < first_chunk[t+1]
  uint8_t dtype[P][N];
  int count;
};

// The tensor that owns chunk c.
template <int P, int N> __device__ __forceinline__ int mt_find(const MtTable<P, N>& t, int64_t c) {
  int lo = 0, hi = t.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (t.first_chunk[mid] <= c) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// Fills tables from `lists` (P spans of equal length; an empty span, or an undefined tensor in one,
// leaves its pointers null)
// and calls launch(table, total_chunks) for each full or final table. Empty tensors are skipped.
template <int P, int N, class Launch>
void mt_for_each_table(const std::span<const Tensor> (&lists)[P], Launch&& launch) {
  const size_t count = lists[0].size();
  MtTable<P, N> t{};
  int64_t chunks = 0;
  auto flush = [&] {
    if (t.count == 0) return;
    t.first_chunk[t.count] = chunks;
    launch(t, chunks);
    t = MtTable<P, N>{};
    chunks = 0;
  };
  for (size_t i = 0; i < count; ++i) {
    const int64_t n = lists[0][i].numel();
    if (n == 0) continue;
    const int k = t.count;
    for (int p = 0; p < P; ++p) {
      if (lists[p].empty() || !lists[p][i].defined()) continue;  // a null pointer: nothing to do there
      t.ptr[p][k] = lists[p][i].raw_data();
      t.dtype[p][k] = dcode(lists[p][i].dtype());
    }
    t.numel[k] = n;
    t.first_chunk[k] = chunks;
    chunks += (n + kMtChunk - 1) / kMtChunk;
    t.count = k + 1;
    if (t.count == N) flush();
  }
  flush();
}

// Checks that every list has one tensor per parameter, of the parameter's size, contiguous,
// floating, on the given CUDA device. An empty list passes when `optional`.
inline void mt_check(const char* op, int dev, std::span<const Tensor> ref, std::span<const Tensor> list,
                     const char* name, bool optional) {
  if (optional && list.empty()) return;
  LT_CHECK(list.size() == ref.size(), std::string(op) + ": " + std::to_string(list.size()) + " " + name + " for " +
                                          std::to_string(ref.size()) + " parameters",
           "each parameter needs one", "pass matching lists");
  for (size_t i = 0; i < list.size(); ++i) {
    const Tensor& t = list[i];
    LT_CHECK(t.defined() && t.device() == Device::cuda(dev),
             std::string(op) + ": " + name + "[" + std::to_string(i) + "] is not on cuda:" + std::to_string(dev),
             t.defined() ? "it is on " + t.device().str() : "it is undefined", "keep the group on one device");
    LT_CHECK(t.numel() == ref[i].numel() && t.is_contiguous() &&
                 (t.dtype() == DType::F32 || t.dtype() == DType::BF16 || t.dtype() == DType::F16),
             std::string(op) + ": " + name + "[" + std::to_string(i) + "] does not fit its parameter",
             std::string(dtype_name(t.dtype())) + " " + shape_str(t.shape()) + " vs " + shape_str(ref[i].shape()),
             "use contiguous f32/bf16/f16 tensors of the parameter's size");
  }
}

}  // namespace lt::cuda
