// Reductions. reduce_sum collapses the input's dims into alternating kept/reduced groups and
// picks a kernel: rows (reduce the trailing group), columns (reduce the leading group: the
// bias gradient; 16-byte loads, a whole block down the rows), or a general walk for any other
// pattern. All accumulate in f32 and write each output once, without atomics, so results are
// deterministic run to run. sum_squares sums many tensors in one launch into per-block
// partials, then one block adds them in fixed order.
#include <algorithm>
#include <cstdlib>
#include <type_traits>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/multi_tensor.cuh"
#include "backend/cuda/row_kernels.cuh"
#include "core/knobs.h"

namespace lt {
using namespace cuda;

namespace {

// Sum of each of `rows` contiguous rows of length len; one block per row.
template <class T, class O> __global__ void reduce_rows_kernel(O* out, const T* in, int64_t rows, int64_t len) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* p = in + r * len;
    float s = 0.f;
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) s += load_t(p, j);
    s = block_sum(s);
    if (threadIdx.x == 0) store_t(out, r, s);
  }
}

// Column sums of a [rows, cols] matrix (the bias gradient: dY [B*T, N] -> [N], N columns over
// 16k rows). A block of kColThreads threads is a (packs x lanes) grid: threadIdx.x picks a pack
// of P adjacent columns (16 bytes when P = kVec<T>), threadIdx.y one of `lanes` row phases
// that stride down every row, four rows in flight; a warp reads whole 32-byte sectors
// (packs >= 2). The lanes' f32 sums then meet in a fixed shared-memory tree: the result does not
// depend on timing, and there is no scratch and no atomic.
constexpr int kColThreads = 1024;
constexpr int kColMaxLanes = 512;

// Adds rows r, r + step, ... (below `end`) of the pack of P columns at p to s: four loads in
// flight, then the rest one at a time. Both column-sum kernels take this one order of additions.
template <class T, int P>
__device__ __forceinline__ void sum_rows(float (&s)[P], const T* p, int64_t r, int64_t end, int64_t step,
                                         int64_t cols) {
  auto load = [&](int64_t row, float(&v)[P]) {
    if constexpr (P > 1) rk::load_f32<T, P>(p + row * cols, v);
    else v[0] = load_t(p, row * cols);
  };
  for (; r + 3 * step < end; r += 4 * step) {
    float v[4][P];
#pragma unroll
    for (int u = 0; u < 4; ++u) load(r + u * step, v[u]);
#pragma unroll
    for (int u = 0; u < 4; ++u)
#pragma unroll
      for (int k = 0; k < P; ++k) s[k] += v[u][k];
  }
  for (; r < end; r += step) {
    float v[P];
    load(r, v);
#pragma unroll
    for (int k = 0; k < P; ++k) s[k] += v[k];
  }
}

template <class T, class O, int P> __global__ void __launch_bounds__(kColThreads)
reduce_cols_kernel(O* out, const T* in, int64_t rows, int64_t cols) {
  __shared__ float part[kColThreads * 8];  // [lanes][packs][P], P <= 8
  const int packs = blockDim.x, lanes = blockDim.y;
  const int64_t c0 = (int64_t(blockIdx.x) * packs + threadIdx.x) * P;
  float s[P];
#pragma unroll
  for (int k = 0; k < P; ++k) s[k] = 0.f;
  // P > 1 only when cols % P == 0: a pack lies wholly inside the row
  if (c0 < cols) sum_rows<T, P>(s, in + c0, threadIdx.y, rows, lanes, cols);
  float* mine = part + (threadIdx.y * packs + threadIdx.x) * P;
#pragma unroll
  for (int k = 0; k < P; ++k) mine[k] = s[k];
  __syncthreads();
  for (int half = lanes / 2; half > 0; half /= 2) {  // lanes is a power of two
    if (int(threadIdx.y) < half) {
      const float* other = part + ((threadIdx.y + half) * packs + threadIdx.x) * P;
#pragma unroll
      for (int k = 0; k < P; ++k) mine[k] += other[k];
    }
    __syncthreads();
  }
  if (threadIdx.y == 0 && c0 < cols)
#pragma unroll
    for (int k = 0; k < P; ++k) store_t(out, c0 + k, mine[k]);
}

// The same sums in two passes through the borrowed cuBLASLt workspace, for a tall matrix whose
// columns alone fill few blocks (the bias gradients of GPT-2's linears: 16384 rows of 768-3072
// columns give the one-pass kernel 48-192 blocks of 1024 threads, and cuBLASLt's own BGRAD
// epilogue kernel read them at about 45% of the H200's bandwidth). Pass 1: block (x, y) owns the
// packs x * kPartPacks.. of P columns and the rows [y * rows, (y + 1) * rows); a warp reads 512
// contiguous bytes of a row, each lane four rows in flight; the kPartRowLanes lanes meet in a
// fixed tree and the block writes its sums to part[y][cols]. Pass 2 adds the parts in a fixed
// tree per column. Fixed partition, fixed order: bitwise reproducible, no atomics, no allocation.
constexpr int kPartPacks = 32, kPartRowLanes = 8;

template <class T, int P> __global__ void __launch_bounds__(kPartPacks* kPartRowLanes)
reduce_cols_part_kernel(float* __restrict__ part, const T* __restrict__ in, int64_t rows, int64_t cols,
                        int64_t rows_per_part) {
  __shared__ float red[kPartRowLanes][kPartPacks * P];
  const int64_t c0 = (int64_t(blockIdx.x) * kPartPacks + threadIdx.x) * P;
  const int64_t r0 = int64_t(blockIdx.y) * rows_per_part;
  const int64_t r1 = r0 + rows_per_part < rows ? r0 + rows_per_part : rows;
  float s[P];
#pragma unroll
  for (int k = 0; k < P; ++k) s[k] = 0.f;
  // cols % P == 0: a pack lies wholly inside the row
  if (c0 < cols) sum_rows<T, P>(s, in + c0, r0 + threadIdx.y, r1, kPartRowLanes, cols);
  float* mine = &red[threadIdx.y][threadIdx.x * P];
#pragma unroll
  for (int k = 0; k < P; ++k) mine[k] = s[k];
  for (int half = kPartRowLanes / 2; half > 0; half /= 2) {
    __syncthreads();
    if (int(threadIdx.y) < half) {
      const float* other = &red[threadIdx.y + half][threadIdx.x * P];
#pragma unroll
      for (int k = 0; k < P; ++k) mine[k] += other[k];
    }
  }
  if (threadIdx.y == 0 && c0 < cols) {
    float* out = part + int64_t(blockIdx.y) * cols + c0;
#pragma unroll
    for (int k = 0; k < P; ++k) out[k] = mine[k];
  }
}

// Pass 2: column j summed over parts 0..parts-1. Block (kSumCols, kSumLanes): thread (tx, ty)
// adds parts ty, ty + kSumLanes, ..., then the lanes meet in a fixed tree.
constexpr int kSumCols = 32, kSumLanes = 32;
template <class O> __global__ void __launch_bounds__(kSumCols* kSumLanes)
reduce_cols_sum_kernel(O* __restrict__ out, const float* __restrict__ part, int64_t cols, int parts) {
  __shared__ float red[kSumLanes][kSumCols + 1];
  const int64_t j = int64_t(blockIdx.x) * kSumCols + threadIdx.x;
  const int ty = threadIdx.y;
  float a = 0.f;
  if (j < cols) {
#pragma unroll 4
    for (int q = ty; q < parts; q += kSumLanes) a += part[int64_t(q) * cols + j];
  }
  red[ty][threadIdx.x] = a;
  for (int half = kSumLanes / 2; half > 0; half >>= 1) {
    __syncthreads();
    if (ty < half) red[ty][threadIdx.x] += red[ty + half][threadIdx.x];
  }
  if (ty == 0 && j < cols) store_t(out, j, red[0][threadIdx.x]);
}

// LEANTRAIN_REDUCE_COLS_SPLIT=1 turns the two passes on (opt-in: the GPT-2 step on an H100 was no
// faster with them; off, every column sum takes the one-pass kernel).
bool cols_split_on() {
  static const bool on = knob_on("LEANTRAIN_REDUCE_COLS_SPLIT");
  return on;
}

// Two passes when they apply (16-byte packs, the workspace lent, the one-pass grid under two
// blocks per SM, at least 32 rows per part): false otherwise.
template <class T, class O>
bool launch_reduce_cols_split(int dev, O* out, const T* in, int64_t rows, int64_t cols, int one_pass_blocks,
                              cudaStream_t stream) {
  constexpr int V = rk::kVec<T>;
  const int64_t sms = device_state(dev).sm_count;
  if (!cols_split_on() || cols % V != 0 || !rk::aligned16(in) || one_pass_blocks >= 2 * sms) return false;
  int64_t ws_bytes = 0;
  void* ws = cublaslt_workspace_borrow(dev, &ws_bytes);
  if (!ws) return false;
  const int64_t gx = (cols / V + kPartPacks - 1) / kPartPacks;
  // About four blocks of 256 threads per SM, one wave; no part under 32 rows; as many parts as
  // the workspace holds.
  int64_t parts = std::min<int64_t>({(4 * sms + gx - 1) / gx, rows / 32, ws_bytes / (cols * int64_t(sizeof(float))),
                                     65535});
  if (parts < 2) return false;
  const int64_t per = (rows + parts - 1) / parts;
  parts = (rows + per - 1) / per;  // no part without rows
  float* part = static_cast<float*>(ws);
  reduce_cols_part_kernel<T, V><<<dim3(unsigned(gx), unsigned(parts)), dim3(kPartPacks, kPartRowLanes), 0, stream>>>(
      part, in, rows, cols, per);
  LT_CUDA_LAUNCH_CHECK("reduce_cols_part_kernel");
  reduce_cols_sum_kernel<O><<<unsigned((cols + kSumCols - 1) / kSumCols), dim3(kSumCols, kSumLanes), 0, stream>>>(
      out, part, cols, int(parts));
  LT_CUDA_LAUNCH_CHECK("reduce_cols_sum_kernel");
  return true;
}

// Launch shape: as many row lanes as rows (a power of two, at most kColMaxLanes), the rest of
// the block spread over column packs; the two-pass kernels instead when the grid would leave
// most SMs idle.
template <class T, class O>
void launch_reduce_cols(int dev, O* out, const T* in, int64_t rows, int64_t cols, cudaStream_t stream) {
  int lanes = 1;
  while (lanes < kColMaxLanes && lanes < rows) lanes *= 2;
  const int packs = kColThreads / lanes;
  constexpr int V = rk::kVec<T>;
  const bool vec = cols % V == 0 && rk::aligned16(in);
  const int64_t npacks = vec ? cols / V : cols;
  const unsigned grid = unsigned((npacks + packs - 1) / packs);
  if (launch_reduce_cols_split<T, O>(dev, out, in, rows, cols, int(grid), stream)) return;
  if (vec) reduce_cols_kernel<T, O, V><<<grid, dim3(packs, lanes), 0, stream>>>(out, in, rows, cols);
  else reduce_cols_kernel<T, O, 1><<<grid, dim3(packs, lanes), 0, stream>>>(out, in, rows, cols);
  LT_CUDA_LAUNCH_CHECK("reduce_cols_kernel");
}

// Any pattern: kept dims (sizes ks, input strides kst) index the output, reduced dims (rs, rst)
// are summed. Small reductions: one thread per output; large ones: one block per output.
struct GeneralArgs {
  int64_t nout, nred;
  Layout kept, red;
  Strides kst, rst;
};

template <class T, class O> __global__ void reduce_general_thread_kernel(O* out, const T* in, GeneralArgs a) {
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < a.nout; o += int64_t(gridDim.x) * blockDim.x) {
    const int64_t base = strided_offset(o, a.kept, a.kst);
    float s = 0.f;
    for (int64_t j = 0; j < a.nred; ++j) s += load_t(in, base + strided_offset(j, a.red, a.rst));
    store_t(out, o, s);
  }
}

template <class T, class O> __global__ void reduce_general_block_kernel(O* out, const T* in, GeneralArgs a) {
  for (int64_t o = blockIdx.x; o < a.nout; o += gridDim.x) {
    const int64_t base = strided_offset(o, a.kept, a.kst);
    float s = 0.f;
    for (int64_t j = threadIdx.x; j < a.nred; j += blockDim.x) s += load_t(in, base + strided_offset(j, a.red, a.rst));
    s = block_sum(s);
    if (threadIdx.x == 0) store_t(out, o, s);
  }
}

// First index of the maximum of each row (strict >, as the CPU); one warp per row.
template <class T> __global__ void argmax_kernel(int64_t* out, const T* x, int64_t rows, int64_t len) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x >> 5);
  for (int64_t r = blockIdx.x * int64_t(blockDim.x >> 5) + (threadIdx.x >> 5); r < rows; r += warps) {
    const T* p = x + r * len;
    float best = -INFINITY;
    int64_t bi = -1;
    for (int64_t j = lane; j < len; j += 32) {
      const float v = load_t(p, j);
      if (bi < 0 || v > best) { best = v; bi = j; }
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, best, o);
      const int64_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (oi >= 0 && (bi < 0 || ov > best || (ov == best && oi < bi))) { best = ov; bi = oi; }
    }
    if (lane == 0) out[r] = bi < 0 ? 0 : bi;
  }
}

// sum_squares: per-block partial sums in a fixed grid, then one block adds them in order.
// The partials live in a small static device buffer (part of the module image, not of the
// allocator): this op has no output big enough to serve as scratch.
constexpr int kMaxPartials = 1024;
__device__ float g_sumsq_partials[kMaxPartials];

using SqTable = MtTable<1, 1024>;

__global__ void sum_squares_partial_kernel(SqTable t, int64_t chunks) {
  float s = 0.f;
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const int k = mt_find(t, c);
    const int64_t start = (c - t.first_chunk[k]) * kMtChunk;
    const int64_t end = min(start + kMtChunk, t.numel[k]);
    const void* p = t.ptr[0][k];
    int64_t i = start + threadIdx.x;
    // f32 (the gradients of mixed precision): four values a load where the tensor is 16-byte
    // aligned; chunks start at multiples of kMtChunk, so every float4 lies inside one chunk.
    if (t.dtype[0][k] == uint8_t(DType::F32) && (reinterpret_cast<uintptr_t>(p) & 15u) == 0) {
      const float4* p4 = reinterpret_cast<const float4*>(p);
      const int64_t end4 = start / 4 + (end - start) / 4;
      for (int64_t j = start / 4 + threadIdx.x; j < end4; j += blockDim.x) {
        const float4 v = p4[j];
        s += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
      }
      i = end4 * 4 + threadIdx.x;
    }
    for (; i < end; i += blockDim.x) {
      const float v = load_float(p, i, t.dtype[0][k]);
      s += v * v;
    }
  }
  s = block_sum(s);
  if (threadIdx.x == 0) g_sumsq_partials[blockIdx.x] = s;
}

__global__ void sum_squares_final_kernel(float* out, int parts) { add_block_partials(out, g_sumsq_partials, parts); }

void check_tensor(const Tensor& t, int dev, const char* op, const char* name) {
  LT_CHECK(t.defined() && t.device() == Device::cuda(dev),
           std::string(op) + ": " + name + " is not on cuda:" + std::to_string(dev),
           t.defined() ? "it is on " + t.device().str() : "it is undefined", "move it with .to()");
  LT_CHECK(t.is_contiguous(), std::string(op) + ": " + name + " must be contiguous",
           "got strides " + shape_str(t.strides()), "call contiguous() first");
}

// The kernel for reduce_sum's pattern: sizes/reduced are its alternating dim groups.
template <class T, class O>
void run_reduce(int dev, O* po, const T* pi, const std::vector<int64_t>& sizes, const std::vector<bool>& reduced,
                int64_t nout, int64_t n, cudaStream_t stream) {
  const size_t g = sizes.size();
  if (g == 0 || (g == 1 && !reduced[0])) {  // only size-1 dims "reduced": same shape, a copy
    if constexpr (std::is_same_v<T, O>)  // (reduce_sum casts a widening one)
      LT_CUDA_CHECK(cudaMemcpyAsync(po, pi, size_t(nout) * sizeof(T), cudaMemcpyDeviceToDevice, stream));
  } else if (reduced.back() && (g == 1 || g == 2)) {  // [kept?, reduced]: row sums
    const int64_t len = sizes.back();
    const int threads = len >= 4096 ? 1024 : 256;
    reduce_rows_kernel<T, O><<<grid_for(nout, 1, 65535), threads, 0, stream>>>(po, pi, nout, len);
    LT_CUDA_LAUNCH_CHECK("reduce_rows_kernel");
  } else if (g == 2 && reduced[0]) {  // [reduced, kept]: column sums
    launch_reduce_cols<T, O>(dev, po, pi, sizes[0], sizes[1], stream);
  } else {
    GeneralArgs a{};
    a.nout = nout;
    a.nred = n / nout;
    Shape ks, kst, rs, rst;
    int64_t stride = 1;
    for (size_t i = g; i-- > 0;) {  // contiguous input: strides from the innermost group out
      (reduced[i] ? rs : ks).insert((reduced[i] ? rs : ks).begin(), sizes[i]);
      (reduced[i] ? rst : kst).insert((reduced[i] ? rst : kst).begin(), stride);
      stride *= sizes[i];
    }
    LT_CHECK(ks.size() <= size_t(kMaxDims) && rs.size() <= size_t(kMaxDims), "reduce_sum: pattern too complex",
             "more than " + std::to_string(kMaxDims) + " alternating kept/reduced dims", "reduce in two steps");
    a.kept.rank = int(ks.size());
    a.red.rank = int(rs.size());
    for (size_t i = 0; i < ks.size(); ++i) { a.kept.size[i] = ks[i]; a.kst.s[i] = kst[i]; }
    for (size_t i = 0; i < rs.size(); ++i) { a.red.size[i] = rs[i]; a.rst.s[i] = rst[i]; }
    if (a.nred <= 64) {
      reduce_general_thread_kernel<T, O><<<grid_for(nout, 256), 256, 0, stream>>>(po, pi, a);
      LT_CUDA_LAUNCH_CHECK("reduce_general_thread_kernel");
    } else {
      reduce_general_block_kernel<T, O><<<grid_for(nout, 1, 65535), 256, 0, stream>>>(po, pi, a);
      LT_CUDA_LAUNCH_CHECK("reduce_general_block_kernel");
    }
  }
}

}  // namespace

void CudaBackend::reduce_sum(const Tensor& out, const Tensor& in) {
  check_tensor(out, device_index_, "reduce_sum", "out");
  check_tensor(in, device_index_, "reduce_sum", "in");
  const bool widen = out.dtype() == DType::F32 && (in.dtype() == DType::BF16 || in.dtype() == DType::F16);
  LT_CHECK((out.dtype() == in.dtype() || widen) && out.dim() == in.dim(),
           "reduce_sum: out must keep in's rank and dtype (or be f32 for 16-bit in)",
           shape_str(out.shape()) + " " + dtype_name(out.dtype()) + " vs " + shape_str(in.shape()) + " " +
               dtype_name(in.dtype()),
           "keep reduced dims as size 1");
  for (int64_t d = 0; d < in.dim(); ++d)
    LT_CHECK(out.shape()[size_t(d)] == in.shape()[size_t(d)] || out.shape()[size_t(d)] == 1,
             "reduce_sum: out shape " + shape_str(out.shape()) + " does not fit in " + shape_str(in.shape()),
             "each dim must equal in's or be 1", "fix the output shape");
  const int64_t nout = out.numel();
  if (nout == 0) return;
  if (in.numel() == 0) {  // sum over an empty dim
    fill(out, 0.0);
    return;
  }
  // Groups of adjacent dims that are all kept or all reduced (size-1 dims dropped).
  std::vector<int64_t> sizes;
  std::vector<bool> reduced;
  for (int64_t d = 0; d < in.dim(); ++d) {
    const int64_t s = in.shape()[size_t(d)];
    if (s == 1) continue;
    const bool r = out.shape()[size_t(d)] == 1;
    if (!sizes.empty() && reduced.back() == r) sizes.back() *= s;
    else { sizes.push_back(s); reduced.push_back(r); }
  }
  const int64_t n = in.numel();
  const cudaStream_t stream = current_stream();
  // Sums are f32 in every kernel: an f32 out of 16-bit in only skips the rounding.
  const size_t g = sizes.size();
  if (widen && (g == 0 || (g == 1 && !reduced[0]))) {  // nothing summed: a cast
    copy(out, in);
    return;
  }
  dispatch_float(in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (widen) run_reduce<T, float>(device_index_, out.data<float>(), in.data<T>(), sizes, reduced, nout, n, stream);
    else run_reduce<T, T>(device_index_, out.data<T>(), in.data<T>(), sizes, reduced, nout, n, stream);
  });
}

void CudaBackend::argmax_lastdim(const Tensor& out, const Tensor& x) {
  check_tensor(out, device_index_, "argmax", "out");
  check_tensor(x, device_index_, "argmax", "x");
  LT_CHECK(x.dim() >= 1 && x.size(-1) > 0, "argmax: x needs a non-empty last dim", "got " + shape_str(x.shape()),
           "pass a tensor with at least one element per row");
  const int64_t len = x.size(-1), rows = x.numel() / len;
  LT_CHECK(out.dtype() == DType::I64 && out.numel() == rows, "argmax: out must be i64 with one value per row",
           std::string(dtype_name(out.dtype())) + " " + shape_str(out.shape()), "allocate an i64 output");
  if (rows == 0) return;
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    argmax_kernel<T><<<grid_for(rows, 8, 65535), 256, 0, current_stream()>>>(out.data<int64_t>(), x.data<T>(), rows, len);
    LT_CUDA_LAUNCH_CHECK("argmax_kernel");
  });
}

void CudaBackend::sum_squares(const Tensor& out, std::span<const Tensor> xs) {
  check_tensor(out, device_index_, "sum_squares", "out");
  LT_CHECK(out.dtype() == DType::F32 && out.numel() == 1, "sum_squares: out must be one f32",
           std::string(dtype_name(out.dtype())) + " " + shape_str(out.shape()), "allocate f32 [1]");
  mt_check("sum_squares", device_index_, xs, xs, "tensors", false);
  const std::span<const Tensor> lists[1] = {xs};
  const int sms = device_state(device_index_).sm_count;
  mt_for_each_table<1, 1024>(lists, [&](const SqTable& t, int64_t chunks) {
    const int grid = int(std::min<int64_t>({chunks, int64_t(4) * sms, int64_t(kMaxPartials)}));
    sum_squares_partial_kernel<<<grid, kMtThreads, 0, current_stream()>>>(t, chunks);
    LT_CUDA_LAUNCH_CHECK("sum_squares_partial_kernel");
    sum_squares_final_kernel<<<1, kMaxPartials, 0, current_stream()>>>(out.data<float>(), grid);
    LT_CUDA_LAUNCH_CHECK("sum_squares_final_kernel");
  });
}

}  // namespace lt
