// Cross-entropy over a vocabulary row, one block per row.
//
// Forward: each thread keeps an online (max, sum of exp) over its share of the row, merged
// across the block in a fixed order; lse = max + log(sum), loss = lse - logit[target].
// Backward: dlogits = (exp(logit - lse) - onehot) * dloss[row], computed and written in the
// same pass that reads the logits, so no f32 probability tensor ever exists. Each element is
// read and written by the same thread, so dlogits may alias logits (in-place backward).
//
// Rows may be padded apart (GPT-2's logits: 50257 columns in rows of 50264, the stride is
// strides()[0]); rows of an odd stride start at any 2-byte boundary, so each row is split
// into a scalar head up to the next 16-byte boundary, a body of 16-byte packs, and a tail.
#include <algorithm>
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/row_kernels.cuh"

namespace lt {
using namespace cuda;
using namespace cuda::rk;

namespace {

// Elements before the first 16-byte boundary of a row (0 when packs are not used).
template <class T, int P> __device__ __forceinline__ int64_t row_head(const T* row, int64_t V) {
  if (P == 1) return 0;
  const int64_t h = int64_t((16u - (reinterpret_cast<uintptr_t>(row) & 15u)) & 15u) / int64_t(sizeof(T));
  return h < V ? h : V;
}

// Visits a row as head (scalars), body (P-packs), tail (scalars); f(j, v[n]) gets n values at column j.
template <class T, int P, class FS, class FP>
__device__ __forceinline__ void for_row(const T* row, int64_t V, FS&& scalar, FP&& pack) {
  const int tid = threadIdx.x, nt = blockDim.x;
  const int64_t head = row_head<T, P>(row, V);
  const int64_t npack = (V - head) / P;
  for (int64_t j = tid; j < head; j += nt) scalar(j, to_f32(row[j]));
#pragma unroll 4
  for (int64_t k = tid; k < npack; k += nt) {
    float v[P];
    load_f32<T, P>(row + head + k * P, v);
    pack(head + k * P, v);
  }
  for (int64_t j = head + npack * P + tid; j < V; j += nt) scalar(j, to_f32(row[j]));
}

template <class T, int P, class I>
__global__ void ce_fwd_kernel(float* __restrict__ loss, float* __restrict__ lse, const T* __restrict__ logits,
                              const I* __restrict__ targets, int64_t V, int64_t ld, int64_t ignore_index) {
  const int64_t r = blockIdx.x;
  const T* row = logits + r * ld;
  OnlineMax<T> st;
  for_row<T, P>(
      row, V,
      [&](int64_t, float v) {
        const float a[1] = {v};
        st.template add<1>(a);
      },
      [&](int64_t, const float(&v)[P]) { st.template add<P>(v); });
  st.block_reduce();
  if (threadIdx.x == 0) {
    const float l = st.s > 0.0f ? st.m + logf(st.s) : -INFINITY;
    lse[r] = l;
    const int64_t t = int64_t(targets[r]);
    float out;
    if (t == ignore_index) out = 0.0f;
    else if (t < 0 || t >= V) out = NAN;  // the front-end validates targets; never read out of bounds
    else out = l - to_f32(row[t]);
    loss[r] = out;
  }
}

// No __restrict__: dlogits may alias logits.
template <class T, int P, class I>
__global__ void ce_bwd_kernel(T* dlogits, const float* __restrict__ dloss, const T* logits,
                              const float* __restrict__ lse, const I* __restrict__ targets, int64_t V, int64_t ld,
                              int64_t dld, int64_t ignore_index, float dloss_all = 0.0f) {
  const int64_t r = blockIdx.x;
  const T* row = logits + r * ld;
  T* drow = dlogits + r * dld;
  const int64_t t = int64_t(targets[r]);
  const bool ignored = t == ignore_index;
  const float scale = ignored ? 0.0f : dloss ? dloss[r] : dloss_all;  // no dloss: every row's is dloss_all
  const float l = lse[r];
  auto grad = [&](int64_t j, float x) {
    return ignored ? 0.0f : (exp_acc<T>(x - l) - (j == t ? 1.0f : 0.0f)) * scale;
  };
  for_row<T, P>(
      row, V, [&](int64_t j, float x) { drow[j] = from_f32<T>(grad(j, x)); },
      [&](int64_t j, const float(&v)[P]) {
        float d[P];
#pragma unroll
        for (int k = 0; k < P; ++k) d[k] = grad(j + k, v[k]);
        store_f32<T, P>(drow + j, d);
      });
}

// The training loss's forward and backward in one pass, for logits nothing reads again: a block
// copies its row into shared memory (cp.async, every load in flight at once), finds the row's max
// and then its sum of exp (each in a fixed order: deterministic), writes loss and lse, and
// overwrites the row in memory with (exp(x - lse) - onehot) * scale. The logits are read from
// memory once instead of twice (GPT-2: 1.6 GB each way). Two blocks share an SM (a row of GPT-2
// is 100 KB), so one's loads overlap the other's arithmetic. Rows start 16-byte aligned.
constexpr int kFusedThreads = 512;
constexpr int64_t kFusedMaxRowBytes = 110 * 1024;  // two rows per SM (227 KB of shared memory)

template <class T, int P, class I>
__global__ void __launch_bounds__(kFusedThreads, 2)
    ce_fused_kernel(float* __restrict__ loss, float* __restrict__ lse, T* logits, const I* __restrict__ targets,
                    int64_t V, int64_t ld, int64_t ignore_index, float scale) {
  extern __shared__ __align__(16) unsigned char ce_smem[];
  T* srow = reinterpret_cast<T*>(ce_smem);
  const int64_t r = blockIdx.x;
  T* row = logits + r * ld;
  const int tid = threadIdx.x;
  const int64_t npack = V / P;
  for (int64_t k = tid; k < npack; k += kFusedThreads) mma::cp_async16(srow + k * P, row + k * P, true);
  mma::cp_async_commit();
  const int64_t tj = npack * P + tid;  // the last V % P columns, one per thread
  const bool has_tail = tj < V;
  const float tv = has_tail ? to_f32(row[tj]) : -INFINITY;
  const int64_t t = int64_t(targets[r]);
  const bool ignored = t == ignore_index;
  const bool in_range = t >= 0 && t < V;
  // Read before any thread writes: the reductions' barriers come first.
  const float xt = tid == 0 && !ignored && in_range ? to_f32(row[t]) : 0.0f;
  mma::cp_async_wait<0>();
  __syncthreads();
  auto pack_at = [&](int64_t k) { return reinterpret_cast<const Pack<T, P>*>(srow)[k]; };
  float m = tv;
  for (int64_t k = tid; k < npack; k += kFusedThreads) {
    const Pack<T, P> pk = pack_at(k);
#pragma unroll
    for (int j = 0; j < P; ++j) m = fmaxf(m, to_f32(pk.v[j]));
  }
  m = block_max(m);
  float s = 0.0f;
  if (m != -INFINITY) {  // a row of -inf has no probability mass (lse = -inf, as ce_fwd_kernel)
    if (has_tail) s = exp_acc<T>(tv - m);
    for (int64_t k = tid; k < npack; k += kFusedThreads) {
      const Pack<T, P> pk = pack_at(k);
#pragma unroll
      for (int j = 0; j < P; ++j) s += exp_acc<T>(to_f32(pk.v[j]) - m);
    }
  }
  s = block_sum(s);
  const float l = s > 0.0f ? m + logf(s) : -INFINITY;
  if (tid == 0) {
    lse[r] = l;
    loss[r] = ignored ? 0.0f : in_range ? l - xt : NAN;  // the front-end validates targets
  }
  const float sc = ignored ? 0.0f : scale;
  auto grad = [&](int64_t j, float x) { return (exp_acc<T>(x - l) - (j == t ? 1.0f : 0.0f)) * sc; };
  for (int64_t k = tid; k < npack; k += kFusedThreads) {
    const Pack<T, P> pk = pack_at(k);
    float d[P];
#pragma unroll
    for (int j = 0; j < P; ++j) d[j] = grad(k * P + j, to_f32(pk.v[j]));
    store_f32<T, P>(row + k * P, d);
  }
  if (has_tail) row[tj] = from_f32<T>(grad(tj, tv));
}

// x[r, :V] *= *s, one block per row.
template <class T> __global__ void scale_rows_kernel(T* x, const float* __restrict__ s, int64_t V, int64_t ld) {
  const float k = *s;
  T* row = x + int64_t(blockIdx.x) * ld;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) row[j] = from_f32<T>(k * to_f32(row[j]));
}

// Threads per row: enough for one pack each, 32 to 512.
int ce_threads(int64_t V, int P) {
  int n = 32;
  while (n < 512 && int64_t(n) * P < V) n *= 2;
  return n;
}

// Elements between the starts of two rows of an [N, V] operand (padded rows allowed).
int64_t row_step(const Tensor& t) { return t.size(0) > 1 ? t.strides()[0] : t.size(1); }

// [N, V] with stride 1 along a row and rows at least V apart (contiguous, or padded rows).
bool rows_ok(const Tensor& t) {
  return t.dim() == 2 && (t.size(1) <= 1 || t.strides()[1] == 1) && row_step(t) >= t.size(1);
}

void check_ce(const char* op, const Tensor& logits, const Tensor& targets, const Tensor& a, const char* an,
              const Tensor& b, const char* bn) {
  LT_CHECK(logits.defined() && targets.defined() && rows_ok(logits),
           std::string(op) + ": logits must be an [N, V] tensor of contiguous rows",
           "the CUDA kernel reads rows directly", "");
  const int64_t N = logits.size(0);
  LT_CHECK(N < (int64_t(1) << 31), std::string(op) + ": too many rows", "one block per row (grid limit 2^31)", "");
  LT_CHECK(targets.numel() == N && targets.is_contiguous() &&
               (targets.dtype() == DType::I64 || targets.dtype() == DType::I32),
           std::string(op) + ": targets must be a contiguous i64/i32 [" + std::to_string(N) + "] tensor",
           "one class index per row", "");
  for (auto [t, name] : {std::pair{&a, an}, std::pair{&b, bn}})
    LT_CHECK(t->defined() && t->dtype() == DType::F32 && t->numel() == N && t->is_contiguous(),
             std::string(op) + ": " + name + " must be a contiguous f32 [" + std::to_string(N) + "] tensor",
             "per-row statistics are f32", "");
}

template <class F> void dispatch_index(DType t, F&& f) {
  if (t == DType::I64) f(int64_t{});
  else f(int32_t{});
}

}  // namespace

void CudaBackend::cross_entropy_fwd(const Tensor& loss, const Tensor& lse, const Tensor& logits,
                                    const Tensor& targets, int64_t ignore_index) {
  check_ce("cross_entropy_fwd", logits, targets, loss, "loss", lse, "lse");
  const int64_t N = logits.size(0), V = logits.size(1);
  if (N == 0) return;
  LT_CHECK(V > 0, "cross_entropy_fwd: empty vocabulary", "logits need at least one class", "");
  dispatch_float(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    dispatch_index(targets.dtype(), [&](auto itag) {
      using I = decltype(itag);
      constexpr int P = kVec<T>;
      ce_fwd_kernel<T, P, I><<<unsigned(N), ce_threads(V, P), 0, current_stream()>>>(
          loss.data<float>(), lse.data<float>(), logits.data<T>(), targets.data<I>(), V, row_step(logits),
          ignore_index);
      LT_CUDA_LAUNCH_CHECK("ce_fwd_kernel");
    });
  });
}

void CudaBackend::cross_entropy_bwd(const Tensor& dlogits, const Tensor& dloss, const Tensor& logits,
                                    const Tensor& lse, const Tensor& targets, int64_t ignore_index) {
  check_ce("cross_entropy_bwd", logits, targets, dloss, "dloss", lse, "lse");
  LT_CHECK(dlogits.defined() && dlogits.shape() == logits.shape() && dlogits.dtype() == logits.dtype() &&
               rows_ok(dlogits),
           "cross_entropy_bwd: dlogits must be rows of the logits' shape and dtype",
           "the kernel writes it row by row", "");
  const int64_t N = logits.size(0), V = logits.size(1);
  if (N == 0 || V == 0) return;
  const int64_t ld = row_step(logits), dld = row_step(dlogits);
  dispatch_float(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    dispatch_index(targets.dtype(), [&](auto itag) {
      using I = decltype(itag);
      constexpr int P = kVec<T>;
      // Packs need every row pair at the same 16-byte phase: the bases' gap and the row strides'
      // difference both multiples of 16 bytes (true for allocator-aligned tensors of one layout).
      const auto gap = reinterpret_cast<uintptr_t>(dlogits.raw_data()) - reinterpret_cast<uintptr_t>(logits.raw_data());
      const auto drift = uintptr_t(dld - ld) * sizeof(T);
      const bool vec = ((gap | drift) & 15u) == 0;
      if (vec)
        ce_bwd_kernel<T, P, I><<<unsigned(N), ce_threads(V, P), 0, current_stream()>>>(
            dlogits.data<T>(), dloss.data<float>(), logits.data<T>(), lse.data<float>(), targets.data<I>(), V, ld,
            dld, ignore_index);
      else
        ce_bwd_kernel<T, 1, I><<<unsigned(N), ce_threads(V, 1), 0, current_stream()>>>(
            dlogits.data<T>(), dloss.data<float>(), logits.data<T>(), lse.data<float>(), targets.data<I>(), V, ld,
            dld, ignore_index);
      LT_CUDA_LAUNCH_CHECK("ce_bwd_kernel");
    });
  });
}

void CudaBackend::cross_entropy_fwd_bwd(const Tensor& loss, const Tensor& lse, const Tensor& logits,
                                        const Tensor& targets, int64_t ignore_index, float grad_scale) {
  check_ce("cross_entropy_fwd_bwd", logits, targets, loss, "loss", lse, "lse");
  const int64_t N = logits.size(0), V = logits.size(1);
  if (N == 0) return;
  LT_CHECK(V > 0, "cross_entropy_fwd_bwd: empty vocabulary", "logits need at least one class", "");
  const int64_t ld = row_step(logits);
  dispatch_float(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    dispatch_index(targets.dtype(), [&](auto itag) {
      using I = decltype(itag);
      constexpr int P = kVec<T>;
      const int64_t row_bytes = (V / P) * P * int64_t(sizeof(T));
      const bool aligned = aligned16(logits.raw_data()) && (ld * int64_t(sizeof(T))) % 16 == 0;
      if (aligned && row_bytes <= kFusedMaxRowBytes) {
        auto kernel = ce_fused_kernel<T, P, I>;
        allow_smem(kernel, size_t(kFusedMaxRowBytes));
        kernel<<<unsigned(N), kFusedThreads, size_t(std::max<int64_t>(row_bytes, 16)), current_stream()>>>(
            loss.data<float>(), lse.data<float>(), logits.data<T>(), targets.data<I>(), V, ld, ignore_index,
            grad_scale);
        LT_CUDA_LAUNCH_CHECK("ce_fused_kernel");
        return;
      }
      // Rows too long for shared memory (or unaligned): the two kernels, the second in place.
      ce_fwd_kernel<T, P, I><<<unsigned(N), ce_threads(V, P), 0, current_stream()>>>(
          loss.data<float>(), lse.data<float>(), logits.data<T>(), targets.data<I>(), V, ld, ignore_index);
      LT_CUDA_LAUNCH_CHECK("ce_fwd_kernel");
      ce_bwd_kernel<T, P, I><<<unsigned(N), ce_threads(V, P), 0, current_stream()>>>(
          logits.data<T>(), nullptr, logits.data<T>(), lse.data<float>(), targets.data<I>(), V, ld, ld, ignore_index,
          grad_scale);
      LT_CUDA_LAUNCH_CHECK("ce_bwd_kernel");
    });
  });
}

void CudaBackend::scale_rows(const Tensor& x, const Tensor& s) {
  LT_CHECK(x.defined() && rows_ok(x) && s.defined() && s.dtype() == DType::F32 && s.numel() == 1,
           "scale_rows: x must be [N, V] rows and s an f32 scalar", "the kernel scales row by row", "");
  const int64_t N = x.size(0), V = x.size(1);
  if (N == 0 || V == 0) return;
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    scale_rows_kernel<T><<<unsigned(N), 256, 0, current_stream()>>>(x.data<T>(), s.data<float>(), V, row_step(x));
    LT_CUDA_LAUNCH_CHECK("scale_rows_kernel");
  });
}

}  // namespace lt
