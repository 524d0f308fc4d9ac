// Shared by the CUDA kernels: error checks that become lt::Error, typed load/store with
// f32 accumulation, dtype dispatch, the current stream. The host-only parts (LT_CUDA_CHECK,
// LT_CUDA_LAUNCH_CHECK, current_stream) live in cuda_context.h so that .cpp files can use them.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

#include "backend/cuda/cuda_context.h"
#include "leantrain/error.h"
#include "leantrain/tensor.h"

namespace lt::cuda {

template <class T> __device__ __forceinline__ float to_f32(T v) { return float(v); }
template <> __device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> __device__ __forceinline__ float to_f32<__half>(__half v) { return __half2float(v); }
template <class T> __device__ __forceinline__ T from_f32(float v) { return T(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16(v); }
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half(v); }

// The dynamic shared memory a kernel needs, allowed past the 48 KB default (a no-op below it).
template <class K> void allow_smem(K kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    LT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

// Calls f(T{}) with T the device storage type of a floating dtype (f32, f16, bf16).
template <class F> void dispatch_float(DType t, F&& f) {
  switch (t) {
    case DType::F32: f(float{}); return;
    case DType::BF16: f(__nv_bfloat16{}); return;
    case DType::F16: f(__half{}); return;
    default:
      fail(std::string("dtype ") + dtype_name(t) + " is not supported on CUDA", "CUDA kernels take f32, bf16 or f16",
           "cast the tensor first");
  }
}

// A warp's reduction by op (xor-shuffle tree: every lane gets the result, the same order every run).
template <class Op>
__device__ __forceinline__ float warp_reduce(float v, Op op) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
__device__ __forceinline__ float warp_sum(float v) { return warp_reduce(v, SumOp{}); }
__device__ __forceinline__ float warp_max(float v) { return warp_reduce(v, MaxOp{}); }

// A block's reduction by op (blockDim.x threads, at most 1024): each warp's, then the warps' in
// one warp; every thread gets the result. `identity` fills the lanes past the last warp.
template <class Op>
__device__ __forceinline__ float block_reduce(float v, Op op, float identity) {
  __shared__ float partial[32];
  __syncthreads();  // partial[] may still be read by a previous call
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_reduce(v, op);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int nwarps = (blockDim.x + 31) >> 5;
  v = lane < nwarps ? partial[lane] : identity;
  return warp_reduce(v, op);
}
__device__ __forceinline__ float block_sum(float v) { return block_reduce(v, SumOp{}, 0.0f); }

// One block adds parts[0, n) (n <= blockDim.x) into out[0] in a fixed tree: the last pass of the
// per-block partial sums that sum_squares and AdamW's measured update leave in their buffers.
__device__ __forceinline__ void add_block_partials(float* out, const float* parts, int n) {
  const float s = block_sum(threadIdx.x < unsigned(n) ? parts[threadIdx.x] : 0.f);
  if (threadIdx.x == 0) out[0] += s;
}
__device__ __forceinline__ float block_max(float v) { return block_reduce(v, MaxOp{}, -INFINITY); }

inline unsigned blocks_for(int64_t n, int threads) { return unsigned((n + threads - 1) / threads); }

// Thread block clusters need compute capability 9.0 (the current device's, asked once).
inline bool cluster_launch_ok() {
  static const bool ok = [] {
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return major >= 9;
  }();
  return ok;
}

// A launch on `stream` for cudaLaunchKernelEx, in clusters of `cluster_x` blocks along x when
// cluster_x > 1 (gridDim.x a multiple of it). Holds its own attribute, so it stays where it is made.
struct ClusterLaunch {
  cudaLaunchConfig_t cfg{};
  cudaLaunchAttribute attr[1]{};
  ClusterLaunch(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, int cluster_x) {
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = unsigned(cluster_x);
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = cluster_x > 1 ? 1 : 0;
  }
  ClusterLaunch(const ClusterLaunch&) = delete;
  ClusterLaunch& operator=(const ClusterLaunch&) = delete;
};

}  // namespace lt::cuda
