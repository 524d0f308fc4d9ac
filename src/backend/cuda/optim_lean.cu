// Lion and the 8-bit block-wise optimizers, each ONE fused multi-tensor launch per step (one per
// table of tensors for very long groups). They compute the bits cpu_optim_lean.cpp computes:
// explicit round-to-nearest intrinsics (no FMA contraction), constants from optim_consts.h,
// and quant8.h's nearest-code search.
//
// Lion walks multi_tensor.cuh's chunk table, one element per thread. The 8-bit kernels give
// each 256-element quantisation block to one thread block of 256 threads: every thread
// dequantises its element through the map held in shared memory, updates it in f32, the block
// reduces the new absmax, and every thread writes its new code. A block finds its tensor by
// binary search over per-tensor prefix sums of quantisation blocks, as mt_find does for chunks.
#include <cstring>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/multi_tensor.cuh"
#include "backend/cuda/sr_store.cuh"
#include "backend/optim_consts.h"
#include "backend/quant8.h"

namespace lt {
using namespace cuda;

namespace {

__device__ __forceinline__ float sign_of(float c) { return c > 0.f ? 1.f : (c < 0.f ? -1.f : 0.f); }

unsigned grid_cap(int64_t work, int dev) {
  const int64_t cap = int64_t(device_state(dev).sm_count) * 8;  // 8 blocks of 256 threads fill an SM
  return unsigned(work < cap ? work : cap);
}

// ---- Lion, f32/bf16/f16 parameters and states ----

constexpr int kLionMax = 320;
using LionTable = MtTable<3, kLionMax>;  // lists: 0 param, 1 grad, 2 exp_avg

__global__ void lion_kernel(LionTable t, int64_t chunks, LionConsts<float> c, SrTable<kLionMax> sr) {
  for (int64_t ch = blockIdx.x; ch < chunks; ch += gridDim.x) {
    const int k = mt_find(t, ch);
    const int64_t start = (ch - t.first_chunk[k]) * kMtChunk;
    const int64_t end = min(start + kMtChunk, t.numel[k]);
    void* p = t.ptr[0][k];
    const void* g = t.ptr[1][k];
    void* m = t.ptr[2][k];
    for (int64_t i = start + threadIdx.x; i < end; i += blockDim.x) {
      const float gi = __fmul_rn(load_float(g, i, t.dtype[1][k]), c.grad_scale);
      const float mi = load_float(m, i, t.dtype[2][k]);
      const float ci = __fadd_rn(__fmul_rn(c.beta1, mi), __fmul_rn(c.one_minus_beta1, gi));
      const float pi = load_float(p, i, t.dtype[0][k]);
      store_param(p, i, t.dtype[0][k], __fsub_rn(__fmul_rn(pi, c.decay), __fmul_rn(c.lr, sign_of(ci))), sr.on,
                  sr.stream[k]);
      store_float(m, i, t.dtype[2][k], __fadd_rn(__fmul_rn(c.beta2, mi), __fmul_rn(c.one_minus_beta2, gi)));
    }
  }
}

// ---- 8-bit block-wise states ----

constexpr int kQ8Max = 256;  // tensors per launch: ~17 KiB of table + 2 KiB of maps in the parameters
constexpr int kWarps = int(kQuantBlock) / 32;

// S quantised states per parameter (AdamW 2, Lion 1).
template <int S> struct Q8Table {
  void* param[kQ8Max];
  const void* grad[kQ8Max];
  uint8_t* codes[S][kQ8Max];
  float* absmax[S][kQ8Max];
  int64_t numel[kQ8Max];
  int64_t first_block[kQ8Max + 1];  // quantisation block b belongs to tensor k when first_block[k] <= b < first_block[k+1]
  uint8_t pdt[kQ8Max], gdt[kQ8Max];
  int count;
};
template <int S> struct Q8Maps {
  float v[S][kQuantCodes];
};

template <int S> __device__ __forceinline__ int q8_find(const Q8Table<S>& t, int64_t b) {
  int lo = 0, hi = t.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (t.first_block[mid] <= b) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// Copies the maps into shared memory (blockDim.x == kQuantCodes).
template <int S> __device__ __forceinline__ void q8_load_maps(float (*smap)[kQuantCodes], const Q8Maps<S>& maps) {
  for (int s = 0; s < S; ++s) smap[s][threadIdx.x] = maps.v[s][threadIdx.x];
  __syncthreads();
}

// Max of S values over the block's 256 threads, starting from 0 so NaNs are skipped (as the CPU
// does); every thread gets the results.
template <int S> __device__ __forceinline__ void block_max(float (&v)[S], float (*scratch)[kWarps]) {
  __syncthreads();  // scratch may still be read for the previous quantisation block
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int s = 0; s < S; ++s) {
    const float w = warp_max(v[s]);
    if (lane == 0) scratch[s][warp] = w;
  }
  __syncthreads();
  for (int s = 0; s < S; ++s) {
    float r = 0.f;
    for (int w = 0; w < kWarps; ++w) r = fmaxf(r, scratch[s][w]);
    v[s] = r;
  }
}

__global__ void __launch_bounds__(kQuantBlock)
    adamw8bit_kernel(Q8Table<2> t, int64_t blocks, Q8Maps<2> maps, AdamWConsts c, SrTable<kQ8Max> sr) {
  __shared__ float smap[2][kQuantCodes];
  __shared__ float scratch[2][kWarps];
  q8_load_maps<2>(smap, maps);
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const int k = q8_find(t, b);
    const int64_t qb = b - t.first_block[k];
    const int64_t i = qb * kQuantBlock + threadIdx.x;
    const bool valid = i < t.numel[k];  // the tensor's last block may be short
    float mi = 0.f, vi = 0.f;
    if (valid) {
      // Every thread reads the old absmax here, before block_max's barriers; thread 0 writes the new one after them.
      const float m0 = __fmul_rn(smap[0][t.codes[0][k][i]], t.absmax[0][k][qb]);
      const float v0 = __fmul_rn(smap[1][t.codes[1][k][i]], t.absmax[1][k][qb]);
      const float gi = __fmul_rn(load_float(t.grad[k], i, t.gdt[k]), c.grad_scale);
      mi = __fadd_rn(__fmul_rn(c.beta1, m0), __fmul_rn(c.one_minus_beta1, gi));
      vi = __fadd_rn(__fmul_rn(c.beta2, v0), __fmul_rn(__fmul_rn(c.one_minus_beta2, gi), gi));
      const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), c.bc2_sqrt), c.eps);
      const float u = __fdiv_rn(__fmul_rn(c.step_size, mi), denom);
      const float pi = load_float(t.param[k], i, t.pdt[k]);
      store_param(t.param[k], i, t.pdt[k], __fsub_rn(__fmul_rn(pi, c.decay), u), sr.on, sr.stream[k]);
    }
    float amax[2] = {fabsf(mi), fabsf(vi)};
    block_max<2>(amax, scratch);
    if (valid) {
      t.codes[0][k][i] = quantize_nearest(smap[0], quant_normalise(mi, amax[0]));
      t.codes[1][k][i] = quantize_nearest(smap[1], quant_normalise(vi, amax[1]));
    }
    if (threadIdx.x == 0) {
      t.absmax[0][k][qb] = amax[0];
      t.absmax[1][k][qb] = amax[1];
    }
  }
}

__global__ void __launch_bounds__(kQuantBlock)
    lion8bit_kernel(Q8Table<1> t, int64_t blocks, Q8Maps<1> maps, LionConsts<float> c, SrTable<kQ8Max> sr) {
  __shared__ float smap[1][kQuantCodes];
  __shared__ float scratch[1][kWarps];
  q8_load_maps<1>(smap, maps);
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const int k = q8_find(t, b);
    const int64_t qb = b - t.first_block[k];
    const int64_t i = qb * kQuantBlock + threadIdx.x;
    const bool valid = i < t.numel[k];
    float mi = 0.f;
    if (valid) {
      const float m0 = __fmul_rn(smap[0][t.codes[0][k][i]], t.absmax[0][k][qb]);
      const float gi = __fmul_rn(load_float(t.grad[k], i, t.gdt[k]), c.grad_scale);
      const float ci = __fadd_rn(__fmul_rn(c.beta1, m0), __fmul_rn(c.one_minus_beta1, gi));
      const float pi = load_float(t.param[k], i, t.pdt[k]);
      store_param(t.param[k], i, t.pdt[k], __fsub_rn(__fmul_rn(pi, c.decay), __fmul_rn(c.lr, sign_of(ci))), sr.on,
                  sr.stream[k]);
      mi = __fadd_rn(__fmul_rn(c.beta2, m0), __fmul_rn(c.one_minus_beta2, gi));
    }
    float amax[1] = {fabsf(mi)};
    block_max<1>(amax, scratch);
    if (valid) t.codes[0][k][i] = quantize_nearest(smap[0], quant_normalise(mi, amax[0]));
    if (threadIdx.x == 0) t.absmax[0][k][qb] = amax[0];
  }
}

// Checks one quantised state list: u8 codes of each parameter's size and f32 absmax [ceil(n/256)],
// contiguous, on this device; and the map.
void q8_check(const char* op, int dev, std::span<const Tensor> params, const QuantState& q, const char* name) {
  LT_CHECK(q.map != nullptr && q.codes.size() == params.size() && q.absmax.size() == params.size(),
           std::string(op) + ": " + name + " lists do not match the parameters",
           std::to_string(q.codes.size()) + " codes, " + std::to_string(q.absmax.size()) + " absmax for " +
               std::to_string(params.size()) + " parameters",
           "pass one codes and one absmax tensor per parameter, and the map");
  for (size_t k = 0; k < params.size(); ++k) {
    const Tensor &c = q.codes[k], &a = q.absmax[k];
    LT_CHECK(c.defined() && a.defined() && c.device() == Device::cuda(dev) && a.device() == Device::cuda(dev),
             std::string(op) + ": " + name + "[" + std::to_string(k) + "] is not on cuda:" + std::to_string(dev),
             "a quantised state lives beside its parameter", "keep the group on one device");
    LT_CHECK(c.dtype() == DType::U8 && c.numel() == params[k].numel() && c.is_contiguous() &&
                 a.dtype() == DType::F32 && a.numel() == quant_blocks(params[k].numel()) && a.is_contiguous(),
             std::string(op) + ": " + name + "[" + std::to_string(k) + "] does not fit its parameter",
             std::string(dtype_name(c.dtype())) + " codes " + shape_str(c.shape()) + ", " + dtype_name(a.dtype()) +
                 " absmax " + shape_str(a.shape()) + " for " + shape_str(params[k].shape()),
             "use contiguous u8 codes of the parameter's size and f32 absmax [ceil(n/256)]");
  }
}

// Fills tables of up to kQ8Max tensors and calls launch(table, maps, quantisation blocks) for
// each. Empty tensors are skipped.
template <int S, class Launch>
void q8_for_each_table(std::span<const Tensor> params, std::span<const Tensor> grads,
                       const QuantState* const (&qs)[S], Launch&& launch) {
  Q8Maps<S> maps;
  for (int s = 0; s < S; ++s) std::memcpy(maps.v[s], qs[s]->map, sizeof(maps.v[s]));
  Q8Table<S> t{};
  int64_t blocks = 0;
  auto flush = [&] {
    if (t.count == 0) return;
    t.first_block[t.count] = blocks;
    launch(t, maps, blocks);
    t = Q8Table<S>{};
    blocks = 0;
  };
  for (size_t i = 0; i < params.size(); ++i) {
    const int64_t n = params[i].numel();
    if (n == 0) continue;
    const int k = t.count;
    t.param[k] = params[i].raw_data();
    t.grad[k] = grads[i].raw_data();
    t.pdt[k] = dcode(params[i].dtype());
    t.gdt[k] = dcode(grads[i].dtype());
    for (int s = 0; s < S; ++s) {
      t.codes[s][k] = qs[s]->codes[i].template data<uint8_t>();
      t.absmax[s][k] = qs[s]->absmax[i].template data<float>();
    }
    t.numel[k] = n;
    t.first_block[k] = blocks;
    blocks += quant_blocks(n);
    t.count = k + 1;
    if (t.count == kQ8Max) flush();
  }
  flush();
}

}  // namespace

void CudaBackend::lion_step(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> m,
                            const LionArgs& args) {
  mt_check("lion_step", device_index_, params, params, "params", false);
  mt_check("lion_step", device_index_, params, grads, "grads", false);
  mt_check("lion_step", device_index_, params, m, "exp_avg", false);
  const LionConsts<float> c = lion_consts<float>(args);
  const std::span<const Tensor> lists[3] = {params, grads, m};
  SrCursor<kLionMax> sr(params, args.sr);
  mt_for_each_table<3, kLionMax>(lists, [&](const LionTable& t, int64_t chunks) {
    lion_kernel<<<grid_cap(chunks, device_index_), kMtThreads, 0, current_stream()>>>(t, chunks, c, sr.take(t.count));
    LT_CUDA_LAUNCH_CHECK("lion_kernel");
  });
}

void CudaBackend::adamw8bit_step(std::span<const Tensor> params, std::span<const Tensor> grads, const QuantState& m,
                                 const QuantState& v, const AdamWArgs& args) {
  mt_check("adamw8bit_step", device_index_, params, params, "params", false);
  mt_check("adamw8bit_step", device_index_, params, grads, "grads", false);
  q8_check("adamw8bit_step", device_index_, params, m, "exp_avg");
  q8_check("adamw8bit_step", device_index_, params, v, "exp_avg_sq");
  LT_CHECK(args.step >= 1, "adamw8bit_step: step " + std::to_string(args.step), "steps count from 1",
           "pass the 1-based step number");
  const AdamWConsts c = adamw_consts(args);
  const QuantState* qs[2] = {&m, &v};
  SrCursor<kQ8Max> sr(params, args.sr);
  q8_for_each_table<2>(params, grads, qs, [&](const Q8Table<2>& t, const Q8Maps<2>& maps, int64_t blocks) {
    adamw8bit_kernel<<<grid_cap(blocks, device_index_), kQuantBlock, 0, current_stream()>>>(t, blocks, maps, c,
                                                                                             sr.take(t.count));
    LT_CUDA_LAUNCH_CHECK("adamw8bit_kernel");
  });
}

void CudaBackend::lion8bit_step(std::span<const Tensor> params, std::span<const Tensor> grads, const QuantState& m,
                                const LionArgs& args) {
  mt_check("lion8bit_step", device_index_, params, params, "params", false);
  mt_check("lion8bit_step", device_index_, params, grads, "grads", false);
  q8_check("lion8bit_step", device_index_, params, m, "exp_avg");
  const LionConsts<float> c = lion_consts<float>(args);
  const QuantState* qs[1] = {&m};
  SrCursor<kQ8Max> sr(params, args.sr);
  q8_for_each_table<1>(params, grads, qs, [&](const Q8Table<1>& t, const Q8Maps<1>& maps, int64_t blocks) {
    lion8bit_kernel<<<grid_cap(blocks, device_index_), kQuantBlock, 0, current_stream()>>>(t, blocks, maps, c,
                                                                                            sr.take(t.count));
    LT_CUDA_LAUNCH_CHECK("lion8bit_kernel");
  });
}

}  // namespace lt
