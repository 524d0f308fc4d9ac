// Batch norm over NCHW or NHWC images, deterministic (no atomics: the same bits every run). The
// parameters and running statistics have their own dtype P (f32 under 16-bit autocast), x and y
// theirs (T); the statistics are reduced in f32.
//
// NCHW: one block per channel, which reduces its channel in a fixed order (no scratch memory)
// and then writes it. The forward's two passes (mean, then mean squared deviation) match the
// CPU's; the backward's one reduction (sum dy, sum dy * xhat) is followed by dx in the same block.
//
// NHWC: x is a [M, C] matrix (M = N H W rows) normalised per column, so a channel's values are
// C apart and one block per channel would read them uncoalesced. Instead each kernel's block
// covers a tile of adjacent channels: L lanes (a power of two, at most 32) each take a pack of
// V channels (up to 16 bytes: 8 for 16-bit types, 4 for f32, where C allows, else fewer; one
// access where the pointers are aligned to it), and the block's other threads (kNhwcThreads / L
// row groups) take further rows, so a warp reads whole rows of the tile (C = 64 bf16: 4 rows,
// 512 contiguous bytes per load). The tiling depends on C and the dtype only, so the summation
// order does too. Reductions go through the front-end's f32 scratch partials [2, G, C]: block
// (tile, g) sums the rows of chunk g, [g M / G, (g + 1) M / G), each thread over its rows in
// order, then one thread per channel over the row groups in order (shared memory), into
// partials[s][g][c]; a finalize kernel (one thread per channel) then adds the G chunks in order.
// Forward (training): sum x -> mean; sum (x - mean)^2 -> invstd and the running statistics;
// then y elementwise. Backward: sum dy and sum dy * xhat -> dw, db, and mean(dy),
// mean(dy * xhat) kept in partials' chunk 0 for the dx pass. The elementwise passes use the same
// tiling: every thread keeps its channels' constants in registers and strides over rows.
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_strided.cuh"
#include "backend/cuda/row_kernels.cuh"

namespace lt {
using namespace cuda;

namespace {

constexpr int kThreads = 512;

// The fused relu (args.relu) as the elementwise op computes it, before the rounding store:
// round(relu(v)) is relu(round(v)) bit for bit. Its backward multiplies dy by the mask of the
// saved output, the same product relu's own backward forms.
__device__ __forceinline__ float relu_f(float v) { return v > 0.f ? v : 0.f; }
__device__ __forceinline__ float relu_mask(float y) { return y > 0.f ? 1.f : 0.f; }
// v rounded to T and read back (what storing the norm and reading it in add would do).
template <class T> __device__ __forceinline__ float round_as(float v) {
  T t[1];
  store_t(t, 0, v);
  return load_t(t, 0);
}

// Element i of channel c's N * HW values.
__device__ __forceinline__ int64_t at(int64_t i, int64_t c, int64_t C, int64_t hw) {
  const int64_t n = i / hw;
  return (n * C + c) * hw + (i - n * hw);
}

template <class T, class P>
__global__ void bn_fwd_kernel(T* y, float* mean, float* invstd, const T* x, const P* w, const P* b, P* run_mean,
                              P* run_var, int64_t* tracked, int64_t C, int64_t count, int64_t hw, bool training,
                              float momentum, float eps, bool relu, const T* residual) {
  const int64_t c = blockIdx.x;
  float mu, inv;
  if (training) {
    float s = 0;
    for (int64_t i = threadIdx.x; i < count; i += blockDim.x) s += load_t(x, at(i, c, C, hw));
    mu = block_sum(s) / float(count);
    float sq = 0;
    for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
      const float d = load_t(x, at(i, c, C, hw)) - mu;
      sq += d * d;
    }
    sq = block_sum(sq);
    inv = 1.0f / sqrtf(sq / float(count) + eps);
    if (threadIdx.x == 0 && run_mean) {
      store_t(run_mean, c, (1.0f - momentum) * load_t(run_mean, c) + momentum * mu);
      store_t(run_var, c, (1.0f - momentum) * load_t(run_var, c) + momentum * (sq / float(count - 1)));
      if (c == 0 && tracked) *tracked += 1;
    }
  } else {
    mu = load_t(run_mean, c);
    inv = 1.0f / sqrtf(load_t(run_var, c) + eps);
  }
  if (threadIdx.x == 0) mean[c] = mu, invstd[c] = inv;
  const float scale = inv * load_t(w, c), shift = load_t(b, c);
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    const int64_t o = at(i, c, C, hw);
    float v = (load_t(x, o) - mu) * scale + shift;
    if (residual) v = round_as<T>(v) + load_t(residual, o);
    store_t(y, o, relu ? relu_f(v) : v);
  }
}

template <class T, class P>
__global__ void bn_bwd_kernel(T* dx, P* dw, P* db, const T* dy, const T* x, const P* w, const float* mean,
                              const float* invstd, const T* relu_y, int64_t C, int64_t count, int64_t hw,
                              bool training) {
  const int64_t c = blockIdx.x;
  const float mu = mean[c], inv = invstd[c];
  float s_dy = 0, s_dyx = 0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    const int64_t o = at(i, c, C, hw);
    const float g = relu_y ? load_t(dy, o) * relu_mask(load_t(relu_y, o)) : load_t(dy, o);
    s_dy += g;
    s_dyx += g * (load_t(x, o) - mu) * inv;
  }
  s_dy = block_sum(s_dy);
  s_dyx = block_sum(s_dyx);
  if (threadIdx.x == 0) {
    if (dw) store_t(dw, c, s_dyx);
    if (db) store_t(db, c, s_dy);
  }
  if (!dx) return;
  const float k = load_t(w, c) * inv, mean_dy = s_dy / float(count), mean_dyx = s_dyx / float(count);
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    const int64_t o = at(i, c, C, hw);
    const float g = relu_y ? load_t(dy, o) * relu_mask(load_t(relu_y, o)) : load_t(dy, o);
    store_t(dx, o, training ? k * (g - mean_dy - (load_t(x, o) - mu) * inv * mean_dyx) : k * g);
  }
}

// ---------------------------------------------------------------- NHWC

constexpr int kNhwcThreads = 256;       // the NHWC kernels' block size
constexpr int kNhwcRowsPerThread = 4;   // rows per thread the elementwise grids aim at
static_assert(kNhwcThreads >= 32 * 8, "a block's first threads finalize a whole tile (32 lanes x 8 channels)");

// What a partial pass sums per channel: x; (x - mean)^2; dy and dy * xhat (two planes).
enum class Sums { X, SqDev, Grad };

// V elements of T at p as floats, and back (store_t's rounding): one access when `packed` (every
// pointer aligned to V * sizeof(T)), else V. The tiling, and so the summation order, comes from
// C alone; alignment only picks the access width.
template <class T, int V> __device__ __forceinline__ void load_pack(const T* p, bool packed, float (&v)[V]) {
  if (packed) {
    rk::load_f32<T, V>(p, v);
    return;
  }
#pragma unroll
  for (int k = 0; k < V; ++k) v[k] = load_t(p, k);
}
template <class T, int V> __device__ __forceinline__ void store_pack(T* p, bool packed, const float (&v)[V]) {
  if (packed) {
    rk::Pack<T, V> pk;
#pragma unroll
    for (int k = 0; k < V; ++k) store_t(pk.v, k, v[k]);
    *reinterpret_cast<rk::Pack<T, V>*>(p) = pk;
    return;
  }
#pragma unroll
  for (int k = 0; k < V; ++k) store_t(p, k, v[k]);
}

// This thread's place in a tile of L lanes x kNhwcThreads / L row groups; c: its first channel.
struct TileLane {
  int lane, group, groups;
  int64_t c;
  __device__ __forceinline__ TileLane(int L, int V)
      : lane(int(threadIdx.x) & (L - 1)), group(int(threadIdx.x) / L), groups(kNhwcThreads / L),
        c((int64_t(blockIdx.x) * L + lane) * V) {}
};

// partials[s][g][c] for g = blockIdx.y: this chunk's sums (see Sums) of the tile's channels.
template <class T, int V, Sums S>
__global__ void bn_nhwc_partial_kernel(float* __restrict__ part, const T* __restrict__ x, const T* __restrict__ dy,
                                       const float* __restrict__ mean, const float* __restrict__ invstd,
                                       const T* __restrict__ relu_y, int64_t M, int64_t C, int L, bool packed) {
  constexpr int NS = S == Sums::Grad ? 2 : 1;
  __shared__ float sh[NS][kNhwcThreads * V];
  const TileLane t(L, V);
  const int64_t G = gridDim.y, g = blockIdx.y, r0 = g * M / G, r1 = (g + 1) * M / G;
  float a[V] = {}, b[V] = {};
  if (t.c < C) {
    float mu[V] = {}, inv[V] = {};
#pragma unroll
    for (int k = 0; k < V; ++k) {
      if (S != Sums::X) mu[k] = mean[t.c + k];
      if (S == Sums::Grad) inv[k] = invstd[t.c + k];
    }
#pragma unroll 4
    for (int64_t r = r0 + t.group; r < r1; r += t.groups) {
      float xv[V];
      load_pack<T, V>(x + r * C + t.c, packed, xv);
      if constexpr (S == Sums::X) {
#pragma unroll
        for (int k = 0; k < V; ++k) a[k] += xv[k];
      } else if constexpr (S == Sums::SqDev) {
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const float d = xv[k] - mu[k];
          a[k] += d * d;
        }
      } else {
        float gv[V];
        load_pack<T, V>(dy + r * C + t.c, packed, gv);
        if (relu_y) {
          float yv[V];
          load_pack<T, V>(relu_y + r * C + t.c, packed, yv);
#pragma unroll
          for (int k = 0; k < V; ++k) gv[k] *= relu_mask(yv[k]);
        }
#pragma unroll
        for (int k = 0; k < V; ++k) {
          a[k] += gv[k];
          b[k] += gv[k] * (xv[k] - mu[k]) * inv[k];
        }
      }
    }
  }
  // The row groups' sums, then one thread per channel of the tile adds them in group order.
  const int width = L * V;
#pragma unroll
  for (int k = 0; k < V; ++k) {
    sh[0][t.group * width + t.lane * V + k] = a[k];
    if (NS == 2) sh[NS - 1][t.group * width + t.lane * V + k] = b[k];
  }
  __syncthreads();
  const int64_t col = int64_t(blockIdx.x) * width + threadIdx.x;
  if (int(threadIdx.x) >= width || col >= C) return;
#pragma unroll
  for (int s = 0; s < NS; ++s) {
    float sum = 0;
    for (int i = 0; i < t.groups; ++i) sum += sh[s][i * width + threadIdx.x];
    part[(s * G + g) * C + col] = sum;
  }
}

// The finalize kernels' blocks: 32 channels (the lanes of a warp, so reads of a chunk's row are
// coalesced) x 8 chunk lanes. One thread per channel summing all G chunks in turn was latency-bound
// (17-34 us a launch at G = 256 on an H100).
constexpr int kFinCols = 32, kFinLanes = 8;

// Column c of one [G, C] plane of partials summed in a fixed order: chunk lane l adds chunks l,
// l + 8, ... in order, then the block's first row of threads adds the 8 lanes in order. Every
// thread of the block calls it; the sum is valid where threadIdx.y == 0.
__device__ __forceinline__ float chunk_sum(const float* plane, int64_t G, int64_t C, int64_t c) {
  __shared__ float sh[kFinLanes][kFinCols];
  float s = 0;
  if (c < C)
    for (int64_t g = threadIdx.y; g < G; g += kFinLanes) s += plane[g * C + c];
  sh[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  float t = 0;
  if (threadIdx.y == 0)
    for (int l = 0; l < kFinLanes; ++l) t += sh[l][threadIdx.x];
  __syncthreads();  // sh is reused by the next call
  return t;
}

__device__ __forceinline__ int64_t channel_index() { return blockIdx.x * int64_t(kFinCols) + threadIdx.x; }

// Training, after the pass summing x into plane 0.
__global__ void bn_nhwc_mean_kernel(float* mean, const float* part, int64_t G, int64_t C, int64_t count) {
  const int64_t c = channel_index();
  const float s = chunk_sum(part, G, C, c);
  if (threadIdx.y == 0 && c < C) mean[c] = s / float(count);
}

// Training, after the pass summing (x - mean)^2 into `part`: invstd from the biased variance and
// the running statistics' update with the unbiased one, as the NCHW kernel.
template <class P>
__global__ void bn_nhwc_var_kernel(float* invstd, P* run_mean, P* run_var, int64_t* tracked, const float* mean,
                                   const float* part, int64_t G, int64_t C, int64_t count, float momentum,
                                   float eps) {
  const int64_t c = channel_index();
  const float sq = chunk_sum(part, G, C, c);
  if (threadIdx.y != 0 || c >= C) return;
  invstd[c] = 1.0f / sqrtf(sq / float(count) + eps);
  if (!run_mean) return;
  store_t(run_mean, c, (1.0f - momentum) * load_t(run_mean, c) + momentum * mean[c]);
  store_t(run_var, c, (1.0f - momentum) * load_t(run_var, c) + momentum * (sq / float(count - 1)));
  if (c == 0 && tracked) *tracked += 1;
}

// Eval: the running statistics.
template <class P>
__global__ void bn_nhwc_eval_stats_kernel(float* mean, float* invstd, const P* run_mean, const P* run_var, int64_t C,
                                          float eps) {
  const int64_t c = channel_index();
  if (threadIdx.y != 0 || c >= C) return;
  mean[c] = load_t(run_mean, c);
  invstd[c] = 1.0f / sqrtf(load_t(run_var, c) + eps);
}

// y = (x - mean) * (invstd * w) + b, plus the residual (the norm rounded to T first) where given,
// relu'd when `relu`.
template <class T, class P, int V>
__global__ void bn_nhwc_apply_kernel(T* __restrict__ y, const T* __restrict__ x, const float* __restrict__ mean,
                                     const float* __restrict__ invstd, const P* __restrict__ w,
                                     const P* __restrict__ b, const T* __restrict__ residual, int64_t M, int64_t C,
                                     int L, bool packed, bool relu) {
  const TileLane t(L, V);
  if (t.c >= C) return;  // no barrier in this kernel
  float mu[V], scale[V], shift[V];
#pragma unroll
  for (int k = 0; k < V; ++k) {
    mu[k] = mean[t.c + k];
    scale[k] = invstd[t.c + k] * load_t(w, t.c + k);
    shift[k] = load_t(b, t.c + k);
  }
  for (int64_t r = int64_t(blockIdx.y) * t.groups + t.group; r < M; r += int64_t(gridDim.y) * t.groups) {
    float v[V];
    load_pack<T, V>(x + r * C + t.c, packed, v);
#pragma unroll
    for (int k = 0; k < V; ++k) v[k] = (v[k] - mu[k]) * scale[k] + shift[k];
    if (residual) {
      float rv[V];
      load_pack<T, V>(residual + r * C + t.c, packed, rv);
#pragma unroll
      for (int k = 0; k < V; ++k) v[k] = round_as<T>(v[k]) + rv[k];
    }
    if (relu) {
#pragma unroll
      for (int k = 0; k < V; ++k) v[k] = relu_f(v[k]);
    }
    store_pack<T, V>(y + r * C + t.c, packed, v);
  }
}

// After the pass summing dy and dy * xhat into planes 0 and 1: dw, db (where defined), and the
// dx pass's mean(dy), mean(dy * xhat) over each plane's chunk 0 (each column is read by its own
// block only, and overwritten after the block's last read of it).
template <class P>
__global__ void bn_nhwc_grad_kernel(P* dw, P* db, float* part, int64_t G, int64_t C, int64_t count) {
  const int64_t c = channel_index();
  const float s_dy = chunk_sum(part, G, C, c), s_dyx = chunk_sum(part + G * C, G, C, c);
  if (threadIdx.y != 0 || c >= C) return;
  if (dw) store_t(dw, c, s_dyx);
  if (db) store_t(db, c, s_dy);
  part[c] = s_dy / float(count);
  part[G * C + c] = s_dyx / float(count);
}

// dx = k (dy - mean(dy) - xhat mean(dy * xhat)) in training, k dy in eval; k = w * invstd.
// mean_dy, mean_dyx: read in training only.
template <class T, class P, int V>
__global__ void bn_nhwc_dx_kernel(T* __restrict__ dx, const T* __restrict__ dy, const T* __restrict__ x,
                                  const P* __restrict__ w, const float* __restrict__ mean,
                                  const float* __restrict__ invstd, const float* __restrict__ mean_dy,
                                  const float* __restrict__ mean_dyx, const T* __restrict__ relu_y, int64_t M,
                                  int64_t C, int L, bool training, bool packed) {
  const TileLane t(L, V);
  if (t.c >= C) return;  // no barrier in this kernel
  float mu[V], inv[V], kw[V], mg[V] = {}, mgx[V] = {};
#pragma unroll
  for (int k = 0; k < V; ++k) {
    mu[k] = mean[t.c + k];
    inv[k] = invstd[t.c + k];
    kw[k] = load_t(w, t.c + k) * inv[k];
    if (training) mg[k] = mean_dy[t.c + k], mgx[k] = mean_dyx[t.c + k];
  }
  for (int64_t r = int64_t(blockIdx.y) * t.groups + t.group; r < M; r += int64_t(gridDim.y) * t.groups) {
    float gv[V], o[V];
    load_pack<T, V>(dy + r * C + t.c, packed, gv);
    if (relu_y) {
      float yv[V];
      load_pack<T, V>(relu_y + r * C + t.c, packed, yv);
#pragma unroll
      for (int k = 0; k < V; ++k) gv[k] *= relu_mask(yv[k]);
    }
    if (training) {
      float xv[V];
      load_pack<T, V>(x + r * C + t.c, packed, xv);
#pragma unroll
      for (int k = 0; k < V; ++k) o[k] = kw[k] * (gv[k] - mg[k] - (xv[k] - mu[k]) * inv[k] * mgx[k]);
    } else {
#pragma unroll
      for (int k = 0; k < V; ++k) o[k] = kw[k] * gv[k];
    }
    store_pack<T, V>(dx + r * C + t.c, packed, o);
  }
}

// The tiling of C channels: V channels per lane (the widest pack up to 16 bytes that divides C),
// L lanes per tile, `tiles` tiles; packed: every pointer aligned to a pack (else V accesses).
struct NhwcTiling {
  int V = 1, L = 1;
  int64_t tiles = 1;
  bool packed = true;
};

NhwcTiling tiling_for(int64_t C, size_t elem, std::initializer_list<const void*> ptrs) {
  NhwcTiling t;
  while (size_t(t.V) * 2 * elem <= 16 && C % (t.V * 2) == 0) t.V *= 2;
  for (const void* p : ptrs) t.packed = t.packed && reinterpret_cast<uintptr_t>(p) % (uintptr_t(t.V) * elem) == 0;
  const int64_t packs = C / t.V;
  while (t.L < 32 && t.L < packs) t.L *= 2;
  t.tiles = (packs + t.L - 1) / t.L;
  return t;
}

// An elementwise pass's grid: the tiles, times row blocks of kNhwcRowsPerThread rows a thread.
dim3 elementwise_grid(const NhwcTiling& t, int64_t M) {
  const int64_t rows_per_block = int64_t(kNhwcThreads / t.L) * kNhwcRowsPerThread;
  const int64_t blocks = (M + rows_per_block - 1) / rows_per_block;
  return dim3(unsigned(t.tiles), unsigned(blocks < 1 ? 1 : (blocks > 65535 ? 65535 : blocks)));
}

// Calls f(std::integral_constant<int, V>) for the tiling's pack width (at most 16 bytes of T).
template <class T, class F> void dispatch_vec(int v, F&& f) {
  if constexpr (16 / sizeof(T) >= 8) {
    if (v == 8) return f(std::integral_constant<int, 8>{});
  }
  if (v == 4) return f(std::integral_constant<int, 4>{});
  if (v == 2) return f(std::integral_constant<int, 2>{});
  f(std::integral_constant<int, 1>{});
}

// The finalize kernels' grid and block (kFinCols channels x kFinLanes chunk lanes).
unsigned channel_blocks(int64_t C) { return unsigned((C + kFinCols - 1) / kFinCols); }
const dim3 kFinBlock(kFinCols, kFinLanes);

template <class P> P* ptr(const Tensor& t) { return t.defined() ? t.data<P>() : nullptr; }

void check_input(const Tensor& t, const Tensor& x, int dev, const char* op, const char* name) {
  LT_CHECK(t.defined() && x.dim() == 4 && t.shape() == x.shape() && t.dtype() == x.dtype() && t.is_contiguous() &&
               t.device() == Device::cuda(dev),
           std::string(op) + ": " + name + " must be a contiguous 4-D " + dtype_name(x.dtype()) + " " +
               shape_str(x.shape()) + " tensor on cuda:" + std::to_string(dev),
           "the kernel reads the images (NCHW, or NHWC when channels_last) densely", "");
}

void check_stats(const Tensor& t, int64_t C, const char* op) {
  LT_CHECK(t.defined() && t.dtype() == DType::F32 && t.numel() == C, std::string(op) + ": mean and invstd are f32 [C]",
           "the statistics are kept in f32", "");
}

// partials: f32 [2, G, C] on the device, G = batchnorm_row_chunks(rows).
void check_partials(const Tensor& p, int64_t rows, int64_t C, int dev, const char* op) {
  const int64_t G = batchnorm_row_chunks(rows);
  LT_CHECK(p.defined() && p.dtype() == DType::F32 && p.is_contiguous() && p.device() == Device::cuda(dev) &&
               p.dim() == 3 && p.size(0) == 2 && p.size(1) == G && p.size(2) == C,
           std::string(op) + ": channels_last needs partials, a contiguous f32 [2, " + std::to_string(G) + ", " +
               std::to_string(C) + "] tensor on cuda:" + std::to_string(dev) + "; got " +
               (p.defined() ? std::string(dtype_name(p.dtype())) + " " + shape_str(p.shape()) : std::string("none")),
           "the NHWC kernels reduce the N H W rows in batchnorm_row_chunks(rows) chunks through it", "");
}

// The NHWC forward on device pointers: x, y [M, C]; part: partials [2, G, C]; the running
// statistics and tracked null where not passed.
template <class T, class P>
void bn_nhwc_fwd(T* y, float* mean, float* invstd, const T* x, const P* w, const P* b, P* run_mean, P* run_var,
                 int64_t* tracked, const T* residual, const BatchNormArgs& args, float* part, int64_t G, int64_t M,
                 int64_t C, cudaStream_t st) {
  const NhwcTiling tl = tiling_for(C, sizeof(T), {x, y, residual});
  dispatch_vec<T>(tl.V, [&](auto vtag) {
    constexpr int V = decltype(vtag)::value;
    if (args.training) {
      const dim3 grid(unsigned(tl.tiles), unsigned(G));
      bn_nhwc_partial_kernel<T, V, Sums::X><<<grid, kNhwcThreads, 0, st>>>(part, x, nullptr, nullptr, nullptr,
                                                                            nullptr, M, C, tl.L, tl.packed);
      LT_CUDA_LAUNCH_CHECK("bn_nhwc_partial_kernel");
      bn_nhwc_mean_kernel<<<channel_blocks(C), kFinBlock, 0, st>>>(mean, part, G, C, M);
      LT_CUDA_LAUNCH_CHECK("bn_nhwc_mean_kernel");
      bn_nhwc_partial_kernel<T, V, Sums::SqDev><<<grid, kNhwcThreads, 0, st>>>(part + G * C, x, nullptr, mean,
                                                                                nullptr, nullptr, M, C, tl.L,
                                                                                tl.packed);
      LT_CUDA_LAUNCH_CHECK("bn_nhwc_partial_kernel");
      bn_nhwc_var_kernel<P><<<channel_blocks(C), kFinBlock, 0, st>>>(invstd, run_mean, run_var, tracked, mean,
                                                                        part + G * C, G, C, M, args.momentum,
                                                                        args.eps);
      LT_CUDA_LAUNCH_CHECK("bn_nhwc_var_kernel");
    } else {
      bn_nhwc_eval_stats_kernel<P><<<channel_blocks(C), kFinBlock, 0, st>>>(mean, invstd, run_mean, run_var, C,
                                                                               args.eps);
      LT_CUDA_LAUNCH_CHECK("bn_nhwc_eval_stats_kernel");
    }
    bn_nhwc_apply_kernel<T, P, V><<<elementwise_grid(tl, M), kNhwcThreads, 0, st>>>(
        y, x, mean, invstd, w, b, residual, M, C, tl.L, tl.packed, args.relu);
    LT_CUDA_LAUNCH_CHECK("bn_nhwc_apply_kernel");
  });
}

// The NHWC backward on device pointers (dx, dw, db null where not wanted): the reduction only
// where dw, db or (training) dx need it.
template <class T, class P>
void bn_nhwc_bwd(T* dx, P* dw, P* db, const T* dy, const T* x, const P* w, const float* mean, const float* invstd,
                 const T* relu_y, bool training, float* part, int64_t G, int64_t M, int64_t C, cudaStream_t st) {
  const NhwcTiling tl = tiling_for(C, sizeof(T), {x, dy, dx, relu_y});
  dispatch_vec<T>(tl.V, [&](auto vtag) {
    constexpr int V = decltype(vtag)::value;
    if (dw || db || (training && dx)) {
      bn_nhwc_partial_kernel<T, V, Sums::Grad><<<dim3(unsigned(tl.tiles), unsigned(G)), kNhwcThreads, 0, st>>>(
          part, x, dy, mean, invstd, relu_y, M, C, tl.L, tl.packed);
      LT_CUDA_LAUNCH_CHECK("bn_nhwc_partial_kernel");
      bn_nhwc_grad_kernel<P><<<channel_blocks(C), kFinBlock, 0, st>>>(dw, db, part, G, C, M);
      LT_CUDA_LAUNCH_CHECK("bn_nhwc_grad_kernel");
    }
    if (!dx) return;
    bn_nhwc_dx_kernel<T, P, V><<<elementwise_grid(tl, M), kNhwcThreads, 0, st>>>(
        dx, dy, x, w, mean, invstd, part, part + G * C, relu_y, M, C, tl.L, training, tl.packed);
    LT_CUDA_LAUNCH_CHECK("bn_nhwc_dx_kernel");
  });
}

}  // namespace

void CudaBackend::batchnorm_fwd(const Tensor& y, const Tensor& mean, const Tensor& invstd, const Tensor& x,
                                const Tensor& w, const Tensor& b, const Tensor& running_mean,
                                const Tensor& running_var, const Tensor& num_batches_tracked, const Tensor& residual,
                                const BatchNormArgs& args, const Tensor& partials) {
  check_input(y, x, device_index_, "batchnorm_fwd", "y");
  if (residual.defined()) check_input(residual, x, device_index_, "batchnorm_fwd", "residual");
  check_input(x, x, device_index_, "batchnorm_fwd", "x");
  const ImageDims xd = image_dims(x.shape(), args.channels_last);
  const int64_t C = xd.c, hw = xd.h * xd.w, count = xd.n * hw;
  check_stats(mean, C, "batchnorm_fwd");
  check_stats(invstd, C, "batchnorm_fwd");
  if (args.channels_last && args.training) check_partials(partials, count, C, device_index_, "batchnorm_fwd");
  if (C == 0 || count == 0) return;
  dispatch_float(x.dtype(), [&](auto xt) {
    using T = decltype(xt);
    dispatch_float(w.dtype(), [&](auto pt) {
      using P = decltype(pt);
      if (args.channels_last) {
        bn_nhwc_fwd<T, P>(y.data<T>(), mean.data<float>(), invstd.data<float>(), x.data<T>(), w.data<P>(),
                          b.data<P>(), ptr<P>(running_mean), ptr<P>(running_var), ptr<int64_t>(num_batches_tracked),
                          ptr<T>(residual), args, args.training ? partials.data<float>() : nullptr,
                          args.training ? partials.size(1) : 0, count, C, current_stream());
        return;
      }
      bn_fwd_kernel<T, P><<<unsigned(C), kThreads, 0, current_stream()>>>(
          y.data<T>(), mean.data<float>(), invstd.data<float>(), x.data<T>(), w.data<P>(), b.data<P>(),
          ptr<P>(running_mean), ptr<P>(running_var), ptr<int64_t>(num_batches_tracked), C, count, hw, args.training,
          args.momentum, args.eps, args.relu, ptr<T>(residual));
      LT_CUDA_LAUNCH_CHECK("bn_fwd_kernel");
    });
  });
}

void CudaBackend::batchnorm_bwd(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dy,
                                const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& invstd,
                                const Tensor& y, const BatchNormArgs& args, const Tensor& partials) {
  check_input(dy, x, device_index_, "batchnorm_bwd", "dy");
  if (args.relu) check_input(y, x, device_index_, "batchnorm_bwd", "y (the fused relu's output)");
  if (dx.defined()) check_input(dx, x, device_index_, "batchnorm_bwd", "dx");
  const ImageDims xd = image_dims(x.shape(), args.channels_last);
  const int64_t C = xd.c, hw = xd.h * xd.w, count = xd.n * hw;
  check_stats(mean, C, "batchnorm_bwd");
  check_stats(invstd, C, "batchnorm_bwd");
  if (args.channels_last) check_partials(partials, count, C, device_index_, "batchnorm_bwd");
  if (C == 0 || count == 0) return;
  dispatch_float(x.dtype(), [&](auto xt) {
    using T = decltype(xt);
    dispatch_float(w.dtype(), [&](auto pt) {
      using P = decltype(pt);
      if (args.channels_last) {
        bn_nhwc_bwd<T, P>(ptr<T>(dx), ptr<P>(dw), ptr<P>(db), dy.data<T>(), x.data<T>(), w.data<P>(),
                          mean.data<float>(), invstd.data<float>(), args.relu ? y.data<T>() : nullptr,
                          args.training, partials.data<float>(),
                          partials.size(1), count, C, current_stream());
        return;
      }
      bn_bwd_kernel<T, P><<<unsigned(C), kThreads, 0, current_stream()>>>(
          ptr<T>(dx), ptr<P>(dw), ptr<P>(db), dy.data<T>(), x.data<T>(), w.data<P>(), mean.data<float>(),
          invstd.data<float>(), args.relu ? y.data<T>() : nullptr, C, count, hw, args.training);
      LT_CUDA_LAUNCH_CHECK("bn_bwd_kernel");
    });
  });
}

}  // namespace lt
