// Optimizer steps as ONE fused multi-tensor launch per parameter group (one per 320 tensors for
// longer groups): the pointer/size/dtype table travels in the kernel parameters. The update is
// cpu_optim.cpp's, in f32: bias corrections are computed once on the host in double. Each
// tensor has its own dtype per role (param, grad, states), read at run time; stores round to
// nearest even, as the CPU does, or stochastically (sr_store.cuh). The f32 math uses explicit
// round-to-nearest intrinsics (no FMA contraction), as cpu_optim.cpp is compiled, so both
// backends compute the same bits.
#include <algorithm>
#include <cmath>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/multi_tensor.cuh"
#include "backend/cuda/sr_store.cuh"
#include "core/knobs.h"
#include "memory/streams.h"

namespace lt {
using namespace cuda;

namespace {

constexpr int kMaxTensors = 320;  // 4 lists: ~18 KiB of parameters
using Table = MtTable<4, kMaxTensors>;
using AdamWTable = MtTable<5, kMaxTensors>;  // + the kept casts (null where none): ~21 KiB
using Sr = SrTable<kMaxTensors>;  // +2.5 KiB of parameters

struct AdamWConst {
  float beta1, beta2, eps, decay, step_size, bc2_sqrt, grad_scale;
};

// AdamWArgs::sumsq's per-block partial sums (a fixed grid, then one block adds them in order), in
// a small static buffer as sum_squares keeps its own: the update has no scratch of its own. Only
// the compute stream's unclipped step measures, one launch at a time.
constexpr int kMaxSumsqParts = 1024;
__device__ float g_adamw_sumsq_parts[kMaxSumsqParts];

// One element's update: p, g, m, v in; the new p, m, v out (f32, cpu_optim.cpp's operations).
__device__ __forceinline__ void adamw_update(const AdamWConst& c, float& p, float g, float& m, float& v) {
  const float gi = __fmul_rn(g, c.grad_scale);
  m = __fadd_rn(__fmul_rn(c.beta1, m), __fmul_rn(__fsub_rn(1.f, c.beta1), gi));
  v = __fadd_rn(__fmul_rn(c.beta2, v), __fmul_rn(__fmul_rn(__fsub_rn(1.f, c.beta2), gi), gi));
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), c.bc2_sqrt), c.eps);
  p = __fsub_rn(__fmul_rn(p, c.decay), __fdiv_rn(__fmul_rn(c.step_size, m), denom));
}

// The new parameter values rounded to the kept cast's dtype (bf16 or f16), as cast() rounds.
__device__ __forceinline__ void store_kept4(void* kept, uint8_t dt, int64_t j, const float4& p) {
  if (dt == kBF16) {
    const uint2 w{f32_to_bf16_bits(p.x) | (uint32_t(f32_to_bf16_bits(p.y)) << 16),
                  f32_to_bf16_bits(p.z) | (uint32_t(f32_to_bf16_bits(p.w)) << 16)};
    reinterpret_cast<uint2*>(kept)[j] = w;
  } else {
    store_float(kept, 4 * j, dt, p.x), store_float(kept, 4 * j + 1, dt, p.y);
    store_float(kept, 4 * j + 2, dt, p.z), store_float(kept, 4 * j + 3, dt, p.w);
  }
}

// Lists: 0 param, 1 grad, 2 exp_avg, 3 exp_avg_sq, 4 the kept cast (null: none). A tensor whose
// first four lists are all f32 and 16-byte aligned (parameters, gradients and moments of the
// f32-state policies) moves float4s; any other mix reads and writes each element by its dtype.
// The same update either way. Measure (AdamWArgs::sumsq): each block also sums the squares of the
// gradients it reads into its partial, and an element whose gradient is not finite is left as it
// was; a template argument, so that the usual update's code is the one it always was.
template <bool Measure>
__global__ void adamw_kernel(AdamWTable t, int64_t chunks, AdamWConst c, Sr sr) {
  float sq = 0.f;  // Measure: this thread's squares, in a fixed order
  for (int64_t ch = blockIdx.x; ch < chunks; ch += gridDim.x) {
    const int k = mt_find(t, ch);
    const int64_t start = (ch - t.first_chunk[k]) * kMtChunk;
    const int64_t end = min(start + kMtChunk, t.numel[k]);
    void* p = t.ptr[0][k];
    const void* g = t.ptr[1][k];
    void* m = t.ptr[2][k];
    void* v = t.ptr[3][k];
    void* kept = t.ptr[4][k];
    const uint8_t kdt = t.dtype[4][k];
    int64_t first = start;  // the elements before it went as float4s
    if (t.dtype[0][k] == kF32 && t.dtype[1][k] == kF32 && t.dtype[2][k] == kF32 && t.dtype[3][k] == kF32 &&
        ((reinterpret_cast<uintptr_t>(p) | reinterpret_cast<uintptr_t>(g) | reinterpret_cast<uintptr_t>(m) |
          reinterpret_cast<uintptr_t>(v)) & 15u) == 0 && (reinterpret_cast<uintptr_t>(kept) & 7u) == 0) {
      // start is a multiple of kMtChunk (of 4): every float4 below is aligned.
      float4* p4 = reinterpret_cast<float4*>(p);
      const float4* g4 = reinterpret_cast<const float4*>(g);
      float4* m4 = reinterpret_cast<float4*>(m);
      float4* v4 = reinterpret_cast<float4*>(v);
      const int64_t end4 = start / 4 + (end - start) / 4;
      for (int64_t j = start / 4 + threadIdx.x; j < end4; j += blockDim.x) {
        float4 pj = p4[j], mj = m4[j], vj = v4[j];
        const float4 gj = g4[j];
        if constexpr (Measure) {
          sq += gj.x * gj.x + gj.y * gj.y + gj.z * gj.z + gj.w * gj.w;
          if (isfinite(gj.x)) adamw_update(c, pj.x, gj.x, mj.x, vj.x);
          if (isfinite(gj.y)) adamw_update(c, pj.y, gj.y, mj.y, vj.y);
          if (isfinite(gj.z)) adamw_update(c, pj.z, gj.z, mj.z, vj.z);
          if (isfinite(gj.w)) adamw_update(c, pj.w, gj.w, mj.w, vj.w);
        } else {
          adamw_update(c, pj.x, gj.x, mj.x, vj.x);
          adamw_update(c, pj.y, gj.y, mj.y, vj.y);
          adamw_update(c, pj.z, gj.z, mj.z, vj.z);
          adamw_update(c, pj.w, gj.w, mj.w, vj.w);
        }
        p4[j] = pj;
        m4[j] = mj;
        v4[j] = vj;
        if (kept) store_kept4(kept, kdt, j, pj);
      }
      first = end4 * 4;
    }
    for (int64_t i = first + threadIdx.x; i < end; i += blockDim.x) {
      const float gi = load_float(g, i, t.dtype[1][k]);
      if constexpr (Measure) {
        sq += gi * gi;
        if (!isfinite(gi)) continue;
      }
      float pi = load_float(p, i, t.dtype[0][k]), mi = load_float(m, i, t.dtype[2][k]);
      float vi = load_float(v, i, t.dtype[3][k]);
      adamw_update(c, pi, gi, mi, vi);
      store_param(p, i, t.dtype[0][k], pi, sr.on, sr.stream[k]);
      store_float(m, i, t.dtype[2][k], mi);
      store_float(v, i, t.dtype[3][k], vi);
      // The stored parameter, read back: with stochastic rounding or a 16-bit parameter the cast is
      // of what was stored, as cast() would read it.
      if (kept) store_float(kept, i, kdt, load_float(p, i, t.dtype[0][k]));
    }
  }
  if constexpr (Measure) {
    sq = block_sum(sq);
    if (threadIdx.x == 0) g_adamw_sumsq_parts[blockIdx.x] = sq;
  }
}

// Adds the launch's partial sums (in block order) into out.
__global__ void adamw_sumsq_final_kernel(float* out, int parts) { add_block_partials(out, g_adamw_sumsq_parts, parts); }

struct SgdConst {
  float lr, momentum, dampening, weight_decay, grad_scale;
  bool nesterov, first_step;
};

// Lists: 0 param, 1 grad, 2 momentum buffer (null when the group has none).
__global__ void sgd_kernel(Table t, int64_t chunks, SgdConst c, Sr sr) {
  for (int64_t ch = blockIdx.x; ch < chunks; ch += gridDim.x) {
    const int k = mt_find(t, ch);
    const int64_t start = (ch - t.first_chunk[k]) * kMtChunk;
    const int64_t end = min(start + kMtChunk, t.numel[k]);
    void* p = t.ptr[0][k];
    const void* g = t.ptr[1][k];
    void* b = t.ptr[2][k];
    for (int64_t i = start + threadIdx.x; i < end; i += blockDim.x) {
      const float pi = load_float(p, i, t.dtype[0][k]);
      float gi = __fadd_rn(__fmul_rn(load_float(g, i, t.dtype[1][k]), c.grad_scale), __fmul_rn(c.weight_decay, pi));
      if (b) {
        const float bi = c.first_step ? gi
                                      : __fadd_rn(__fmul_rn(c.momentum, load_float(b, i, t.dtype[2][k])),
                                                  __fmul_rn(__fsub_rn(1.f, c.dampening), gi));
        store_float(b, i, t.dtype[2][k], bi);
        gi = c.nesterov ? __fadd_rn(gi, __fmul_rn(c.momentum, bi)) : bi;
      }
      store_param(p, i, t.dtype[0][k], __fsub_rn(pi, __fmul_rn(c.lr, gi)), sr.on, sr.stream[k]);
    }
  }
}

// At most 8 blocks an SM, each walking chunks. On the optimizer stream (a fused step's updates
// beside the backward) LEANTRAIN_OPT_STREAM_GRID sets that cap: 0 launches a block per chunk, so
// that blocks are short and the backward's kernels get SMs back soon.
unsigned grid_for_chunks(int64_t chunks, int dev) {
  static const int64_t side_per_sm = knob_int("LEANTRAIN_OPT_STREAM_GRID");
  const int64_t per_sm = current_stream_id() == kOptimStream ? side_per_sm : 8;
  if (per_sm == 0) return unsigned(std::min<int64_t>(chunks, int64_t(1) << 30));
  const int64_t cap = int64_t(device_state(dev).sm_count) * per_sm;
  return unsigned(chunks < cap ? chunks : cap);
}

}  // namespace

void CudaBackend::adamw_step(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> m,
                             std::span<const Tensor> v, const AdamWArgs& args) {
  mt_check("adamw_step", device_index_, params, params, "params", false);
  mt_check("adamw_step", device_index_, params, grads, "grads", false);
  mt_check("adamw_step", device_index_, params, m, "exp_avg", false);
  mt_check("adamw_step", device_index_, params, v, "exp_avg_sq", false);
  LT_CHECK(args.step >= 1, "adamw_step: step " + std::to_string(args.step), "steps count from 1",
           "pass the 1-based step number");
  AdamWConst c;
  c.beta1 = args.beta1;
  c.beta2 = args.beta2;
  c.eps = args.eps;
  c.decay = 1.f - args.lr * args.weight_decay;
  const float bc1 = 1.f - float(std::pow(double(args.beta1), double(args.step)));  // as cpu_optim.cpp
  c.bc2_sqrt = float(std::sqrt(1.0 - std::pow(double(args.beta2), double(args.step))));
  c.step_size = args.lr / bc1;
  c.grad_scale = args.grad_scale;
  const bool measure = args.sumsq.defined();
  if (measure) {
    const Tensor& q = args.sumsq;
    LT_CHECK(q.device() == Device::cuda(device_index_) && q.dtype() == DType::F32 && q.numel() == 1,
             "adamw_step: sumsq must be one f32 on cuda:" + std::to_string(device_index_),
             std::string(dtype_name(q.dtype())) + " " + shape_str(q.shape()) + " on " + q.device().str(),
             "allocate f32 [1] on the parameters' device");
    LT_CHECK(current_stream_id() != kOptimStream, "adamw_step: a measured update on the optimizer stream",
             "its partial sums live in one static buffer of the compute stream's", "measure on the compute stream");
  }
  if (!args.kept.empty()) {
    LT_CHECK(args.kept.size() == params.size(), "adamw_step: " + std::to_string(args.kept.size()) + " kept casts for " +
                                                    std::to_string(params.size()) + " parameters",
             "each parameter needs one entry (undefined for none)", "pass matching lists");
    for (size_t i = 0; i < params.size(); ++i) {
      const Tensor& k = args.kept[i];
      if (!k.defined()) continue;
      LT_CHECK(k.device() == Device::cuda(device_index_) && k.is_contiguous() && k.numel() == params[i].numel() &&
                   (k.dtype() == DType::BF16 || k.dtype() == DType::F16),
               "adamw_step: kept cast " + std::to_string(i) + " does not fit its parameter",
               std::string(dtype_name(k.dtype())) + " " + shape_str(k.shape()) + " on " + k.device().str(),
               "keep a contiguous bf16/f16 copy of the parameter's size on its device");
    }
  }
  const std::span<const Tensor> lists[5] = {params, grads, m, v, args.kept};
  SrCursor<kMaxTensors> sr(params, args.sr);
  mt_for_each_table<5, kMaxTensors>(lists, [&](const AdamWTable& t, int64_t chunks) {
    const unsigned all = grid_for_chunks(chunks, device_index_);
    const unsigned grid = measure ? std::min(all, unsigned(kMaxSumsqParts)) : all;  // a partial a block
    auto* kernel = measure ? adamw_kernel<true> : adamw_kernel<false>;
    kernel<<<grid, kMtThreads, 0, current_stream()>>>(t, chunks, c, sr.take(t.count));
    LT_CUDA_LAUNCH_CHECK("adamw_kernel");
    if (measure) {
      adamw_sumsq_final_kernel<<<1, kMaxSumsqParts, 0, current_stream()>>>(args.sumsq.data<float>(), int(grid));
      LT_CUDA_LAUNCH_CHECK("adamw_sumsq_final_kernel");
    }
  });
}

void CudaBackend::sgd_step(std::span<const Tensor> params, std::span<const Tensor> grads,
                           std::span<const Tensor> momentum_bufs, const SgdArgs& args) {
  mt_check("sgd_step", device_index_, params, params, "params", false);
  mt_check("sgd_step", device_index_, params, grads, "grads", false);
  mt_check("sgd_step", device_index_, params, momentum_bufs, "momentum buffers", true);
  SgdConst c{args.lr, args.momentum, args.dampening, args.weight_decay, args.grad_scale, args.nesterov,
             args.first_step};
  const std::span<const Tensor> lists[4] = {params, grads, momentum_bufs, {}};
  SrCursor<kMaxTensors> sr(params, args.sr);
  mt_for_each_table<4, kMaxTensors>(lists, [&](const Table& t, int64_t chunks) {
    sgd_kernel<<<grid_for_chunks(chunks, device_index_), kMtThreads, 0, current_stream()>>>(t, chunks, c,
                                                                                            sr.take(t.count));
    LT_CUDA_LAUNCH_CHECK("sgd_kernel");
  });
}

}  // namespace lt
