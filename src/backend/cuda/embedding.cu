// Embedding gather, its deterministic backward, and rotary position embedding (RoPE).
//
// embedding_bwd: dweight[v] = sum of dout[n] over the positions n with ids[n] == v. Atomics
// would make the f32 sum order (and so the bf16 result) depend on timing, and the backend has
// no scratch to sort the ids into. Instead each block owns a range of VB vocabulary rows (and a
// column chunk): it scans all the ids, keeps the positions that fall in its range in a
// shared-memory list (in position order, via a block prefix sum), counting-sorts that list by
// row (stably, so each row's positions stay in increasing n), and then one warp per row adds
// the dout rows in that order in f32 registers and writes the row once. The sum order is the
// position order: bitwise reproducible, and exact f32 accumulation. If one block's range gets
// more than kEmbCap hits (a very frequent id, e.g. padding), it flushes the list into dweight
// (read-add-write) and goes on, which costs one extra rounding per flush, still deterministic.
//
// rope: rotate-half pairs (i, i + D/2) of the first rot_heads heads by angle
// f32(inv_freq[i] * f32(pos_offset + t)), as transformers computes its freqs; cos and sin are
// taken in double and rounded to f32 (torch's f32 cos/sin, within an ulp), and the rotation uses
// unfused f32 products (__fmul_rn: no FMA contraction), as torch's separate mul and add kernels do.
#include <algorithm>
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/row_kernels.cuh"

namespace lt {
using namespace cuda;
using namespace cuda::rk;

namespace {

// ---------------------------------------------------------------- forward: gather rows

template <class T, int P, class I>
__global__ void embedding_fwd_kernel(T* __restrict__ out, const I* __restrict__ ids, const T* __restrict__ w,
                                     int64_t N, int64_t V, int64_t C) {
  const int64_t cp = C / P, total = N * cp;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / cp, c = (i - n * cp) * P;
    const int64_t id = int64_t(ids[n]);
    Pack<T, P> val;
    if (id >= 0 && id < V) {  // validated by the front-end; never read out of bounds
      val = *reinterpret_cast<const Pack<T, P>*>(w + id * C + c);
    } else {
#pragma unroll
      for (int k = 0; k < P; ++k) val.v[k] = from_f32<T>(0.0f);
    }
    *reinterpret_cast<Pack<T, P>*>(out + n * C + c) = val;
  }
}

// ---------------------------------------------------------------- backward: scan, sort, sum

constexpr int kEmbThreads = 256;
constexpr int kEmbWarps = kEmbThreads / 32;
constexpr int kEmbMaxVB = 256;               // vocabulary rows per block, at most (row offsets fit a u8)
constexpr int kEmbIdsPerThread = 4;          // consecutive ids examined per thread per scan step
constexpr int kEmbChunk = kEmbThreads * kEmbIdsPerThread;
constexpr int kEmbCap = 4096;                // hit-list capacity (>= kEmbChunk)
static_assert(kEmbCap >= kEmbChunk, "a scan step must always fit an empty list");

// Exclusive prefix sum over the block (kEmbThreads threads, in thread order); total gets the sum.
__device__ __forceinline__ int block_exclusive_scan(int v, int* tot, int& total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int incl = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int n = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += n;
  }
  __syncthreads();  // tot[] may still be read by a previous call
  if (lane == 31) tot[warp] = incl;
  __syncthreads();
  int off = 0;
  total = 0;
#pragma unroll
  for (int w = 0; w < kEmbWarps; ++w) {
    const int t = tot[w];
    if (w < warp) off += t;
    total += t;
  }
  return off + incl - v;
}

// Grid: x = vocabulary ranges of VB rows, y = column chunks of 32 * P columns.
template <class T, int P, class I>
__global__ void __launch_bounds__(kEmbThreads)
    embedding_bwd_kernel(T* __restrict__ dw, const T* __restrict__ dout, const I* __restrict__ ids, int64_t N,
                         int64_t V, int C, int VB, int64_t skip_id) {
  __shared__ int list_n[kEmbCap];       // hit positions, in increasing n
  __shared__ uint8_t list_v[kEmbCap];   // their row within the block's range
  __shared__ int sorted_n[kEmbCap];     // positions grouped by row, increasing n within a row
  __shared__ int cnt[kEmbMaxVB], start[kEmbMaxVB], cur[kEmbMaxVB];
  __shared__ int tot[kEmbWarps];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t v0 = int64_t(blockIdx.x) * VB;
  const int vb = int(V - v0 < VB ? V - v0 : VB);  // rows in this block's range
  const int c = int(blockIdx.y) * (32 * P) + lane * P;

  if (tid < kEmbMaxVB) cnt[tid] = 0;  // ordered before any atomicAdd by the scan's barriers

  // Sums the listed hits into dweight and empties the list. Called by every thread.
  auto flush = [&](int len) {
    __syncthreads();  // list_* and cnt are complete
    int total;
    const int my_cnt = tid < vb ? cnt[tid] : 0;
    const int my_start = block_exclusive_scan(my_cnt, tot, total);
    if (tid < vb) {
      start[tid] = my_start;
      cur[tid] = my_start;
    }
    __syncthreads();
    if (warp == 0) {  // stable counting-sort placement, 32 hits at a time in list order
      for (int i0 = 0; i0 < len; i0 += 32) {
        const int i = i0 + lane;
        const bool valid = i < len;
        const int v = valid ? int(list_v[i]) : -1 - lane;  // invalid lanes never match anyone
        const unsigned peers = __match_any_sync(0xffffffffu, v);
        const int rank = __popc(peers & ((1u << lane) - 1u));
        if (valid) sorted_n[cur[v] + rank] = list_n[i];
        __syncwarp();  // every lane has read cur[v] before the group's last lane advances it
        if (valid && lane == 31 - __clz(peers)) cur[v] += __popc(peers);
        __syncwarp();
      }
    }
    __syncthreads();  // sorted_n is complete
    for (int v = warp; v < vb; v += kEmbWarps) {
      const int n_v = cnt[v];
      if (n_v == 0 || c >= C) continue;
      const int* idx = sorted_n + start[v];
      float acc[P];
#pragma unroll
      for (int k = 0; k < P; ++k) acc[k] = 0.0f;
      int e = 0;
      for (; e + 4 <= n_v; e += 4) {  // four rows in flight, added in order
        float a[4][P];
#pragma unroll
        for (int u = 0; u < 4; ++u) load_f32<T, P>(dout + int64_t(idx[e + u]) * C + c, a[u]);
#pragma unroll
        for (int u = 0; u < 4; ++u)
#pragma unroll
          for (int k = 0; k < P; ++k) acc[k] += a[u][k];
      }
      for (; e < n_v; ++e) {
        float a[P];
        load_f32<T, P>(dout + int64_t(idx[e]) * C + c, a);
#pragma unroll
        for (int k = 0; k < P; ++k) acc[k] += a[k];
      }
      T* dst = dw + (v0 + v) * int64_t(C) + c;  // owned by this warp alone
      float old[P];
      load_f32<T, P>(dst, old);
#pragma unroll
      for (int k = 0; k < P; ++k) old[k] += acc[k];
      store_f32<T, P>(dst, old);
    }
    __syncthreads();  // nobody reads cnt, start, sorted_n or the list any more
    if (tid < kEmbMaxVB) cnt[tid] = 0;
    __syncthreads();
  };

  int len = 0;  // hits in the list; the same value in every thread
  for (int64_t base = 0; base < N; base += kEmbChunk) {
    int hit[kEmbIdsPerThread];
    int mine = 0;
#pragma unroll
    for (int k = 0; k < kEmbIdsPerThread; ++k) {
      const int64_t n = base + int64_t(tid) * kEmbIdsPerThread + k;
      hit[k] = -1;
      if (n < N) {
        const int64_t id = int64_t(ids[n]), d = id - v0;
        if (d >= 0 && d < vb && id != skip_id) {
          hit[k] = int(d);
          ++mine;
        }
      }
    }
    int total;
    int pos = block_exclusive_scan(mine, tot, total);
    if (len + total > kEmbCap) {  // uniform: len and total are the same in every thread
      flush(len);
      len = 0;
    }
    pos += len;
#pragma unroll
    for (int k = 0; k < kEmbIdsPerThread; ++k) {
      if (hit[k] < 0) continue;
      list_n[pos] = int(base + int64_t(tid) * kEmbIdsPerThread + k);
      list_v[pos] = uint8_t(hit[k]);
      atomicAdd(&cnt[hit[k]], 1);  // a count: the order of the increments does not matter
      ++pos;
    }
    len += total;
  }
  if (len > 0) flush(len);
}

// ---------------------------------------------------------------- rope

// The inverse frequencies by value (a kernel argument): no device table to allocate or copy.
struct RopeTable {
  float inv_freq[kRopeMaxHalf];
};

// The block's rh angles at position `at` (double sincos, rounded to f32) into shared memory; the
// caller synchronises before reading them.
__device__ __forceinline__ void rope_angles(float* cs_s, float* sn_s, const RopeTable& table, int64_t at, int rh,
                                            bool inverse) {
  for (int k = threadIdx.x; k < rh; k += blockDim.x) {
    const float angle = __fmul_rn(table.inv_freq[k], float(at));
    double s, cth;
    sincos(double(angle), &s, &cth);
    cs_s[k] = float(cth);
    sn_s[k] = inverse ? -float(s) : float(s);
  }
}

// One block per position t (grid-stride): the D/2 angles' sin and cos (double sincos, rounded to
// f32) into shared memory once, then every pair of the R x N rows at that position rotated by the
// block's threads (consecutive threads, consecutive pairs of a row). The sincos runs T * D/2 times,
// not once per element.
// With per-token positions (pos, i32 [P, T]) a block takes one (position row p, t) at a time and
// rotates the R / P rows of that group; without, P = 1 and the angle is pos_offset + t.
template <class T>
__global__ void rope_kernel(T* out, const T* x, int R, int64_t T_len, int N, int D, int rh, RopeTable table,
                            int64_t pos_offset, const int32_t* pos, int P, int rot_heads, bool inverse) {
  __shared__ float cs_s[kRopeMaxHalf], sn_s[kRopeMaxHalf];
  // rh rotated pairs a head (rh < D / 2: partial rotary); the D / 2 work units of a row are the rh
  // pairs, then the other dims two at a time
  const int half = D / 2, per = R / P, work = per * N * half;
  for (int64_t pt = blockIdx.x; pt < int64_t(P) * T_len; pt += gridDim.x) {
    const int p = int(pt / T_len);
    const int64_t t = pt - int64_t(p) * T_len;
    const int64_t at = pos ? int64_t(pos[pt]) : pos_offset + t;
    rope_angles(cs_s, sn_s, table, at, rh, inverse);
    __syncthreads();
    for (int i = threadIdx.x; i < work; i += blockDim.x) {
      const int rn = i / half, k = i - rn * half, b = p * per + rn / N, n = rn - (rn / N) * N;
      const int64_t row = ((int64_t(b) * T_len + t) * N + n) * D;
      const T* xr = x + row;
      T* orow = out + row;
      if (n >= rot_heads) {  // v: passed through
        orow[k] = xr[k];
        orow[k + half] = xr[k + half];
        continue;
      }
      if (k >= rh) {  // partial rotary: unit k past the rotated pairs copies two of the dims 2 rh..
        const int e = 2 * rh + 2 * (k - rh);
        orow[e] = xr[e];
        orow[e + 1] = xr[e + 1];
        continue;
      }
      const float cs = cs_s[k], sn = sn_s[k];
      const float a = to_f32(xr[k]), c = to_f32(xr[k + rh]);  // both read before either write (out may alias x)
      orow[k] = from_f32<T>(__fsub_rn(__fmul_rn(a, cs), __fmul_rn(c, sn)));
      orow[k + rh] = from_f32<T>(__fadd_rn(__fmul_rn(c, cs), __fmul_rn(a, sn)));
    }
    __syncthreads();  // the table is rewritten for the block's next position
  }
}

// rope_kernel with 16 bytes a thread (kVec<T> pairs: 8 bf16 values and the 8 they pair with), for
// head dims of whole pack pairs and rotated widths of whole packs, both pointers 16-byte aligned:
// the same per-element arithmetic, so the same bits. A row's D / (2 kVec) units are its rh / kVec
// rotated packs, then its pass-through dims two packs at a time; a passed-through head (v) is
// copied two packs a unit. TinyLlama's q | k | v rows: 37 us a launch with 2-byte accesses.
template <class T>
__global__ void rope_vec_kernel(T* out, const T* x, int R, int64_t T_len, int N, int D, int rh, RopeTable table,
                                int64_t pos_offset, const int32_t* pos, int P, int rot_heads, bool inverse) {
  constexpr int V = kVec<T>;
  using Pk = Pack<T, V>;
  __shared__ float cs_s[kRopeMaxHalf], sn_s[kRopeMaxHalf];
  const int units = D / (2 * V), rot_units = rh / V, per = R / P, work = per * N * units;
  for (int64_t pt = blockIdx.x; pt < int64_t(P) * T_len; pt += gridDim.x) {
    const int p = int(pt / T_len);
    const int64_t t = pt - int64_t(p) * T_len;
    const int64_t at = pos ? int64_t(pos[pt]) : pos_offset + t;
    rope_angles(cs_s, sn_s, table, at, rh, inverse);
    __syncthreads();
    for (int i = threadIdx.x; i < work; i += blockDim.x) {
      const int rn = i / units, u = i - rn * units, b = p * per + rn / N, n = rn - (rn / N) * N;
      const int64_t row = ((int64_t(b) * T_len + t) * N + n) * D;
      const Pk* xr = reinterpret_cast<const Pk*>(x + row);
      Pk* orow = reinterpret_cast<Pk*>(out + row);
      if (n >= rot_heads || u >= rot_units) {  // v, or the dims past the rotated pairs: copied
        const int e = n >= rot_heads ? 2 * u : 2 * rot_units + 2 * (u - rot_units);
        const Pk c0 = xr[e], c1 = xr[e + 1];
        orow[e] = c0;
        orow[e + 1] = c1;
        continue;
      }
      const Pk a = xr[u], c = xr[u + rot_units];  // both read before either write (out may alias x)
      Pk oa, oc;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float cs = cs_s[u * V + j], sn = sn_s[u * V + j];
        const float av = to_f32(a.v[j]), cv = to_f32(c.v[j]);
        oa.v[j] = from_f32<T>(__fsub_rn(__fmul_rn(av, cs), __fmul_rn(cv, sn)));
        oc.v[j] = from_f32<T>(__fadd_rn(__fmul_rn(cv, cs), __fmul_rn(av, sn)));
      }
      orow[u] = oa;
      orow[u + rot_units] = oc;
    }
    __syncthreads();  // the table is rewritten for the block's next position
  }
}

template <class F> void dispatch_index(const char* op, DType t, F&& f) {
  if (t == DType::I64) f(int64_t{});
  else if (t == DType::I32) f(int32_t{});
  else fail(std::string(op) + ": ids have dtype " + dtype_name(t), "embedding ids must be i32 or i64", "");
}

void check_embedding(const char* op, const Tensor& rows, const Tensor& ids, const Tensor& weight) {
  LT_CHECK(weight.dim() == 2 && weight.is_contiguous(), std::string(op) + ": weight must be a contiguous [V, C] tensor",
           "the kernel indexes its rows", "");
  const int64_t C = weight.size(1), N = ids.numel();
  LT_CHECK(ids.is_contiguous(), std::string(op) + ": ids must be contiguous", "the kernel reads them directly", "");
  LT_CHECK(rows.numel() == N * C && rows.is_contiguous() && rows.dtype() == weight.dtype(),
           std::string(op) + ": expected a contiguous " + dtype_name(weight.dtype()) + " [" + std::to_string(N) +
               ", " + std::to_string(C) + "] tensor of rows",
           "one row of the weight per id", "");
}

}  // namespace

void CudaBackend::embedding_fwd(const Tensor& out, const Tensor& ids, const Tensor& weight) {
  check_embedding("embedding_fwd", out, ids, weight);
  const int64_t V = weight.size(0), C = weight.size(1), N = ids.numel();
  if (N == 0 || C == 0) return;
  dispatch_float(weight.dtype(), [&](auto tag) {
    using T = decltype(tag);
    dispatch_index("embedding_fwd", ids.dtype(), [&](auto itag) {
      using I = decltype(itag);
      T* po = out.data<T>();
      const T* pw = weight.data<T>();
      const bool vec = C % kVec<T> == 0 && aligned16(po) && aligned16(pw);
      const int64_t per_thread = vec ? C / kVec<T> : C;
      const int64_t blocks = std::min<int64_t>((N * per_thread + 255) / 256, int64_t(1) << 20);
      if (vec)
        embedding_fwd_kernel<T, kVec<T>, I><<<unsigned(blocks), 256, 0, current_stream()>>>(po, ids.data<I>(), pw, N, V, C);
      else
        embedding_fwd_kernel<T, 1, I><<<unsigned(blocks), 256, 0, current_stream()>>>(po, ids.data<I>(), pw, N, V, C);
      LT_CUDA_LAUNCH_CHECK("embedding_fwd_kernel");
    });
  });
}

void CudaBackend::embedding_bwd(const Tensor& dweight, const Tensor& dout, const Tensor& ids, int64_t skip_id) {
  check_embedding("embedding_bwd", dout, ids, dweight);
  const int64_t V = dweight.size(0), C = dweight.size(1), N = ids.numel();
  if (N == 0 || C == 0 || V == 0) return;
  LT_CHECK(N < (int64_t(1) << 31) && C < (int64_t(1) << 31), "embedding_bwd: more than 2^31 ids or columns",
           "positions and columns are 32-bit in the kernel", "split the batch");
  dispatch_float(dweight.dtype(), [&](auto tag) {
    using T = decltype(tag);
    dispatch_index("embedding_bwd", ids.dtype(), [&](auto itag) {
      using I = decltype(itag);
      T* pdw = dweight.data<T>();
      const T* pdo = dout.data<T>();
      const bool vec = C % kVec<T> == 0 && aligned16(pdw) && aligned16(pdo);
      const int P = vec ? kVec<T> : 1;
      const int64_t ychunks = (C + 32 * P - 1) / (32 * P);
      LT_CHECK(ychunks <= 65535, "embedding_bwd: rows too wide", "grid y limit", "");
      // Smaller vocabulary ranges for small vocabularies (position tables), so that enough blocks run.
      int vb = kEmbMaxVB;
      while (vb > 32 && ((V + vb - 1) / vb) * ychunks < 512) vb /= 2;
      const dim3 grid(unsigned((V + vb - 1) / vb), unsigned(ychunks));
      if (vec)
        embedding_bwd_kernel<T, kVec<T>, I><<<grid, kEmbThreads, 0, current_stream()>>>(pdw, pdo, ids.data<I>(), N, V,
                                                                                        int(C), vb, skip_id);
      else
        embedding_bwd_kernel<T, 1, I><<<grid, kEmbThreads, 0, current_stream()>>>(pdw, pdo, ids.data<I>(), N, V,
                                                                                  int(C), vb, skip_id);
      LT_CUDA_LAUNCH_CHECK("embedding_bwd_kernel");
    });
  });
}

template <class I>
__global__ void padding_mask_kernel(uint8_t* __restrict__ out, const I* __restrict__ ids, int64_t n, int64_t pad) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = int64_t(ids[i]) != pad;
}

void CudaBackend::padding_mask(const Tensor& out, const Tensor& ids, int64_t pad_id) {
  LT_CHECK(ids.is_contiguous() && out.is_contiguous() && out.dtype() == DType::U8 && out.numel() == ids.numel(),
           "padding_mask: expected contiguous ids and a u8 mask of as many elements", "the kernel reads them flat", "");
  const int64_t n = ids.numel();
  if (n == 0) return;
  dispatch_index("padding_mask", ids.dtype(), [&](auto itag) {
    using I = decltype(itag);
    const int64_t blocks = std::min<int64_t>((n + 255) / 256, 4096);
    padding_mask_kernel<I><<<unsigned(blocks), 256, 0, current_stream()>>>(out.data<uint8_t>(), ids.data<I>(), n, pad_id);
    LT_CUDA_LAUNCH_CHECK("padding_mask_kernel");
  });
}

void CudaBackend::rope(const Tensor& out, const Tensor& x, std::span<const float> inv_freq, int64_t pos_offset,
                       const Tensor& positions, int64_t rot_heads, bool inverse) {
  LT_CHECK(x.dim() == 4 && x.is_contiguous(), "rope: x must be a contiguous [R, T, N, D] tensor",
           "the kernel rotates the last dim of each row", "");
  LT_CHECK(out.shape() == x.shape() && out.dtype() == x.dtype() && out.is_contiguous(),
           "rope: out must match x's shape and dtype", "the kernel writes it row by row", "");
  const int64_t D = x.size(3), T_len = x.size(1), N = x.size(2), rows = x.numel() / (D == 0 ? 1 : D);
  LT_CHECK(D % 2 == 0 && int64_t(inv_freq.size()) <= D / 2 && D / 2 <= kRopeMaxHalf,
           "rope: head dim " + std::to_string(D) + " with " + std::to_string(inv_freq.size()) + " frequencies",
           "rotate-half pairs i with i + r/2, one frequency per pair (r <= D), D/2 <= " + std::to_string(kRopeMaxHalf),
           "use an even head dim of at most " + std::to_string(2 * kRopeMaxHalf));
  if (x.numel() == 0) return;
  RopeTable table{};
  std::copy(inv_freq.begin(), inv_freq.end(), table.inv_freq);
  const int64_t R = rows / (T_len * N);
  LT_CHECK(R * N * (D / 2) < (int64_t(1) << 31), "rope: " + std::to_string(R) + " sequences of " + std::to_string(N) +
           " heads of " + std::to_string(D), "the kernel counts one position's pairs in 32 bits", "use a smaller batch");
  const int64_t P = positions.defined() ? positions.size(0) : 1;
  LT_CHECK(!positions.defined() || (positions.dtype() == DType::I32 && positions.is_contiguous() &&
                                    positions.device() == x.device() && positions.numel() == P * T_len &&
                                    P > 0 && R % P == 0),
           "rope: positions must be a contiguous i32 [P, T] on x's device with P dividing " + std::to_string(R),
           "row r of x takes the positions of row r / (R / P)", "");
  const int32_t* pos = positions.defined() ? positions.data<int32_t>() : nullptr;
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const int rh = int(inv_freq.size()), rot = int(std::min<int64_t>(rot_heads, N));
    const unsigned grid = unsigned(std::min<int64_t>(P * T_len, 65535));
    constexpr int V = kVec<T>;
    if (D % (2 * V) == 0 && rh % V == 0 && aligned16(out.raw_data()) && aligned16(x.raw_data())) {
      rope_vec_kernel<T><<<grid, 256, 0, current_stream()>>>(out.data<T>(), x.data<T>(), int(R), T_len, int(N), int(D),
                                                             rh, table, pos_offset, pos, int(P), rot, inverse);
      LT_CUDA_LAUNCH_CHECK("rope_vec_kernel");
      return;
    }
    rope_kernel<T><<<grid, 256, 0, current_stream()>>>(out.data<T>(), x.data<T>(), int(R), T_len, int(N), int(D), rh,
                                                       table, pos_offset, pos, int(P), rot, inverse);
    LT_CUDA_LAUNCH_CHECK("rope_kernel");
  });
}

}  // namespace lt
