// Batch norm over NCHW images: one block per channel, which reduces its channel in f32 in a
// fixed order (the same bits every run, no atomics, no scratch memory) and then writes it. The
// forward's two passes (mean, then mean squared deviation) match the CPU's; the backward's one
// reduction (sum dy, sum dy * xhat) is followed by dx in the same block. The parameters and
// running statistics have their own dtype P (f32 under 16-bit autocast), x and y theirs (T).
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_strided.cuh"

namespace lt {
using namespace cuda;

namespace {

constexpr int kThreads = 512;

// Element i of channel c's N * HW values.
__device__ __forceinline__ int64_t at(int64_t i, int64_t c, int64_t C, int64_t hw) {
  const int64_t n = i / hw;
  return (n * C + c) * hw + (i - n * hw);
}

template <class T, class P>
__global__ void bn_fwd_kernel(T* y, float* mean, float* invstd, const T* x, const P* w, const P* b, P* run_mean,
                              P* run_var, int64_t* tracked, int64_t C, int64_t count, int64_t hw, bool training,
                              float momentum, float eps) {
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
    store_t(y, o, (load_t(x, o) - mu) * scale + shift);
  }
}

template <class T, class P>
__global__ void bn_bwd_kernel(T* dx, P* dw, P* db, const T* dy, const T* x, const P* w, const float* mean,
                              const float* invstd, int64_t C, int64_t count, int64_t hw, bool training) {
  const int64_t c = blockIdx.x;
  const float mu = mean[c], inv = invstd[c];
  float s_dy = 0, s_dyx = 0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    const int64_t o = at(i, c, C, hw);
    const float g = load_t(dy, o);
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
    const float g = load_t(dy, o);
    store_t(dx, o, training ? k * (g - mean_dy - (load_t(x, o) - mu) * inv * mean_dyx) : k * g);
  }
}

template <class P> P* ptr(const Tensor& t) { return t.defined() ? t.data<P>() : nullptr; }

void check_input(const Tensor& t, const Tensor& x, int dev, const char* op, const char* name) {
  LT_CHECK(t.defined() && t.shape() == x.shape() && t.dtype() == x.dtype() && t.is_contiguous() &&
               t.device() == Device::cuda(dev),
           std::string(op) + ": " + name + " must be a contiguous " + dtype_name(x.dtype()) + " " +
               shape_str(x.shape()) + " tensor on cuda:" + std::to_string(dev),
           "the kernel reads NCHW images densely", "");
}

void check_stats(const Tensor& t, int64_t C, const char* op) {
  LT_CHECK(t.defined() && t.dtype() == DType::F32 && t.numel() == C, std::string(op) + ": mean and invstd are f32 [C]",
           "the statistics are kept in f32", "");
}

}  // namespace

void CudaBackend::batchnorm_fwd(const Tensor& y, const Tensor& mean, const Tensor& invstd, const Tensor& x,
                                const Tensor& w, const Tensor& b, const Tensor& running_mean,
                                const Tensor& running_var, const Tensor& num_batches_tracked,
                                const BatchNormArgs& args) {
  check_input(y, x, device_index_, "batchnorm_fwd", "y");
  check_input(x, x, device_index_, "batchnorm_fwd", "x");
  const int64_t C = x.size(1), hw = x.size(2) * x.size(3), count = x.size(0) * hw;
  check_stats(mean, C, "batchnorm_fwd");
  check_stats(invstd, C, "batchnorm_fwd");
  if (C == 0 || count == 0) return;
  dispatch_float(x.dtype(), [&](auto xt) {
    using T = decltype(xt);
    dispatch_float(w.dtype(), [&](auto pt) {
      using P = decltype(pt);
      bn_fwd_kernel<T, P><<<unsigned(C), kThreads, 0, current_stream()>>>(
          y.data<T>(), mean.data<float>(), invstd.data<float>(), x.data<T>(), w.data<P>(), b.data<P>(),
          ptr<P>(running_mean), ptr<P>(running_var), ptr<int64_t>(num_batches_tracked), C, count, hw, args.training,
          args.momentum, args.eps);
      LT_CUDA_LAUNCH_CHECK("bn_fwd_kernel");
    });
  });
}

void CudaBackend::batchnorm_bwd(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dy,
                                const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& invstd,
                                bool training) {
  check_input(dy, x, device_index_, "batchnorm_bwd", "dy");
  if (dx.defined()) check_input(dx, x, device_index_, "batchnorm_bwd", "dx");
  const int64_t C = x.size(1), hw = x.size(2) * x.size(3), count = x.size(0) * hw;
  check_stats(mean, C, "batchnorm_bwd");
  check_stats(invstd, C, "batchnorm_bwd");
  if (C == 0 || count == 0) return;
  dispatch_float(x.dtype(), [&](auto xt) {
    using T = decltype(xt);
    dispatch_float(w.dtype(), [&](auto pt) {
      using P = decltype(pt);
      bn_bwd_kernel<T, P><<<unsigned(C), kThreads, 0, current_stream()>>>(
          ptr<T>(dx), ptr<P>(dw), ptr<P>(db), dy.data<T>(), x.data<T>(), w.data<P>(), mean.data<float>(),
          invstd.data<float>(), C, count, hw, training);
      LT_CUDA_LAUNCH_CHECK("bn_bwd_kernel");
    });
  });
}

}  // namespace lt
