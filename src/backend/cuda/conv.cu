// Convolution through cuDNN's legacy API (loaded at run time, cudnn_api.h), NCHW or NHWC
// (Conv2dDesc::channels_last). The workspace is the tensor the front-end allocated, of a size
// known without a GPU (conv_workspace_bytes), so plans stay exact: the algorithm is the first of
// cuDNN's heuristic ranking (cudnnGet*_v7, no timing) whose workspace fits it, and for the
// backward also one that is deterministic (the same bits every run) when one fits. f32 runs
// without TF32 unless cuda_set_allow_tf32(true), as the GEMMs do. The descriptors and the choice
// are built once per problem (shape, layout, dtype, workspace) and kept. The backend API's kept
// plans run first (conv_graph.h) unless LEANTRAIN_CUDNN_CONV_GRAPH=0. The
// optional bias is added, and its gradient summed, by kernels of this file.
//
// NHWC: the 4-D descriptors still take (n, c, h, w) as dims, with format CUDNN_TENSOR_NHWC for
// x, y and the filter (w stored [O, KH, KW, C], described as k = O, c = C, h = KH, w = KW).
// cuDNN's tensor-core convolutions for 16-bit data are NHWC ones: for NCHW bf16 its heuristics
// offer only legacy non-tensor-core kernels.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_strided.cuh"
#include "backend/cuda/cudnn_api.h"
#include "backend/cuda/conv_graph.h"
#include "backend/cuda/cudnn_desc.h"
#include "core/knobs.h"
#include "leantrain/cuda_info.h"

namespace lt {
using namespace cuda;

namespace {

constexpr int kThreads = 256;

cudnnDataType_t cudnn_type(DType t) {
  switch (t) {
    case DType::F32: return CUDNN_DATA_FLOAT;
    case DType::BF16: return CUDNN_DATA_BFLOAT16;
    case DType::F16: return CUDNN_DATA_HALF;
    default:
      fail(std::string("conv2d: dtype ") + dtype_name(t) + " on CUDA", "cuDNN convolutions take f32, bf16 or f16",
           "cast the tensors first");
  }
}

// The descriptors of one convolution, destroyed with it.
struct ConvDescs {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  ConvDescs(const Shape& xs, const Shape& ws, const Shape& ys, const Conv2dDesc& d, DType dt) {
    const CudnnApi& api = cudnn();
    const cudnnDataType_t t = cudnn_type(dt);
    const cudnnTensorFormat_t f = d.channels_last ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    // The filter [O, C, KH, KW] or [O, KH, KW, C] is read as an image of O "samples".
    const ImageDims xd = image_dims(xs, d.channels_last), yd = image_dims(ys, d.channels_last),
                    wd = image_dims(ws, d.channels_last);
    LT_CUDNN_CHECK(api.cudnnCreateTensorDescriptor(&x));
    LT_CUDNN_CHECK(api.cudnnCreateTensorDescriptor(&y));
    LT_CUDNN_CHECK(api.cudnnCreateFilterDescriptor(&w));
    LT_CUDNN_CHECK(api.cudnnCreateConvolutionDescriptor(&conv));
    LT_CUDNN_CHECK(api.cudnnSetTensor4dDescriptor(x, f, t, int(xd.n), int(xd.c), int(xd.h), int(xd.w)));
    LT_CUDNN_CHECK(api.cudnnSetTensor4dDescriptor(y, f, t, int(yd.n), int(yd.c), int(yd.h), int(yd.w)));
    LT_CUDNN_CHECK(api.cudnnSetFilter4dDescriptor(w, t, f, int(wd.n), int(wd.c), int(wd.h), int(wd.w)));
    LT_CUDNN_CHECK(api.cudnnSetConvolution2dDescriptor(conv, int(d.pad_h), int(d.pad_w), int(d.stride_h),
                                                       int(d.stride_w), 1, 1, CUDNN_CROSS_CORRELATION,
                                                       CUDNN_DATA_FLOAT));
    // 16-bit convolutions ask the heuristics for tensor-core engines (with the default math they
    // rank the legacy non-tensor-core kernels first: 13x slower on resnet50 on an H200).
    if (dt != DType::F32) LT_CUDNN_CHECK(api.cudnnSetConvolutionMathType(conv, CUDNN_TENSOR_OP_MATH));
  }
  ~ConvDescs() {
    const CudnnApi& api = cudnn();
    api.cudnnDestroyConvolutionDescriptor(conv);
    api.cudnnDestroyFilterDescriptor(w);
    api.cudnnDestroyTensorDescriptor(y);
    api.cudnnDestroyTensorDescriptor(x);
  }
  ConvDescs(const ConvDescs&) = delete;
  ConvDescs& operator=(const ConvDescs&) = delete;
};

enum class Pass { Forward, BackwardData, BackwardFilter };

struct Choice {
  int algo = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

std::mutex g_mu;

std::string key_of(Pass p, const Shape& xs, const Shape& ws, const Conv2dDesc& d, DType dt, int64_t bytes, int dev) {
  std::string k = std::to_string(int(p)) + "|" + std::to_string(dev) + "|" + dtype_name(dt) + "|" +
                  std::to_string(bytes) + "|" + std::to_string(cuda_allow_tf32()) + "|" +
                  (d.channels_last ? "nhwc" : "nchw");
  auto add = [&k](int64_t v) { k += ','; k += std::to_string(v); };
  for (int64_t v : xs) add(v);
  for (int64_t v : ws) add(v);
  for (int64_t v : {d.stride_h, d.stride_w, d.pad_h, d.pad_w}) add(v);
  return k;
}

// LEANTRAIN_CUDNN_LOG=1 (cudnn_log_on) prints each chosen algorithm to stderr, and at exit the
// host time of the convolution calls (how long the CPU spent issuing them: the GPU waits for it
// when the step is launch-bound, as a ResNet's at small batches).

// Per pass: calls, host nanoseconds in the whole backend method, and in cuDNN's execute call.
struct HostTimes {
  std::atomic<int64_t> calls[3] = {}, method_ns[3] = {}, cudnn_ns[3] = {};
  ~HostTimes() {
    static const char* names[3] = {"forward", "backward-data", "backward-filter"};
    for (int p = 0; p < 3; ++p)
      if (calls[p] > 0)
        std::fprintf(stderr, "cudnn host time, %s: %lld calls, %.1f us a call in the method, %.1f us in cuDNN\n",
                     names[p], (long long)calls[p].load(), 1e-3 * double(method_ns[p]) / double(calls[p]),
                     1e-3 * double(cudnn_ns[p]) / double(calls[p]));
  }
};
HostTimes g_host_times;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Adds a backend method's host time to g_host_times (when LEANTRAIN_CUDNN_LOG is on); cudnn()
// brackets the execute call itself.
struct HostTimer {
  int pass;
  int64_t t0 = cudnn_log_on() ? now_ns() : 0, t_cudnn = 0;
  explicit HostTimer(int p) : pass(p) {}
  template <class F> auto cudnn(F f) -> decltype(f()) {
    if (!cudnn_log_on()) return f();
    const int64_t t = now_ns();
    const auto st = f();
    t_cudnn += now_ns() - t;
    return st;
  }
  ~HostTimer() {
    if (!cudnn_log_on()) return;
    g_host_times.calls[pass] += 1;
    g_host_times.method_ns[pass] += now_ns() - t0;
    g_host_times.cudnn_ns[pass] += t_cudnn;
  }
};

// The math type a candidate runs with: f32 without TF32 is held to FMA kernels.
cudnnMathType_t math_for(DType dt, cudnnMathType_t proposed) {
  if (dt == DType::F32 && !cuda_allow_tf32()) return CUDNN_FMA_MATH;
  return proposed;
}

// The first candidate of cuDNN's ranking that succeeds, fits `bytes` and (backward) is
// deterministic; sets the descriptor's math type to it.
template <class Perf, class GetAlgos, class GetSize>
Choice choose(ConvDescs& c, DType dt, int64_t bytes, bool need_deterministic, int count, GetAlgos get_algos,
              GetSize get_size, const char* pass) {
  const CudnnApi& api = cudnn();
  Perf perf[16];
  int n = 0;
  LT_CUDNN_CHECK(get_algos(count < 16 ? count : 16, &n, perf));
  // Tiers, each in cuDNN's ranking: for 16-bit data a tensor-core candidate that is deterministic
  // (where asked), then any tensor-core one, then deterministic ones, then any that fits; for f32
  // without TF32 the candidates ranked as FMA ones first (run with FMA math in every tier).
  const bool half = dt != DType::F32;
  for (int tier = 0; tier < 4; ++tier)
    for (int i = 0; i < n; ++i) {
      if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
      const bool tensor_op = perf[i].mathType == CUDNN_TENSOR_OP_MATH ||
                             perf[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
      const bool det = !need_deterministic || perf[i].determinism == CUDNN_DETERMINISTIC;
      if (tier == 0 && !(det && (half ? tensor_op : true))) continue;
      if (tier == 1 && !(half ? tensor_op : det)) continue;
      if (tier == 2 && !det) continue;
      if (tier == 0 && dt == DType::F32 && !cuda_allow_tf32() && perf[i].mathType != CUDNN_DEFAULT_MATH &&
          perf[i].mathType != CUDNN_FMA_MATH)
        continue;  // a tensor-core variant: its FMA twin is ranked separately
      const cudnnMathType_t math = math_for(dt, perf[i].mathType);
      LT_CUDNN_CHECK(api.cudnnSetConvolutionMathType(c.conv, math));
      size_t need = 0;
      if (get_size(int(perf[i].algo), &need) != CUDNN_STATUS_SUCCESS || int64_t(need) > bytes) continue;
      if (cudnn_log_on())
        std::fprintf(stderr, "cudnn %s: algo %d math %d deterministic %d workspace %zu of %lld (tier %d, rank %d)\n",
                     pass, int(perf[i].algo), int(math), int(perf[i].determinism == CUDNN_DETERMINISTIC), need,
                     (long long)bytes, tier, i);
      return Choice{int(perf[i].algo), math};
    }
  fail(std::string("conv2d: no cuDNN ") + pass + " algorithm fits the " + std::to_string(bytes) + "-byte workspace",
       "each convolution gets a workspace sized from its shapes (conv_workspace_bytes), capped by the limit",
       "raise the limit with lt::set_conv_workspace_limit");
}

// A problem's descriptors and algorithm, built and chosen at its first call and then kept: a
// ResNet step makes ~160 convolution calls over a few dozen problems, and building four
// descriptors a call was host time the GPU waited for. Never destroyed (the map outlives the
// calls; destroying descriptors at exit could run after cuDNN is unloaded).
struct Prepared {
  ConvDescs* descs;
  Choice choice;
};

std::map<std::string, Prepared>& prepared_problems() {
  static auto* m = new std::map<std::string, Prepared>();
  return *m;
}

// The kept descriptors and choice for `key`, or new ones (make(descs) chooses; the descriptor's
// math type is set to the choice).
template <class Make>
const Prepared& prepared(const std::string& key, const Shape& xs, const Shape& ws, const Shape& ys,
                         const Conv2dDesc& d, DType dt, Make make) {
  std::lock_guard<std::mutex> g(g_mu);
  auto& problems = prepared_problems();
  if (auto it = problems.find(key); it != problems.end()) return it->second;
  auto* descs = new ConvDescs(xs, ws, ys, d, dt);
  const Choice ch = make(*descs);
  LT_CUDNN_CHECK(cudnn().cudnnSetConvolutionMathType(descs->conv, ch.math));
  return problems.emplace(key, Prepared{descs, ch}).first->second;
}

void* ws_ptr(const Tensor& ws) { return ws.defined() ? ws.raw_data() : nullptr; }
size_t ws_bytes(const Tensor& ws) { return ws.defined() ? size_t(ws.numel()) : 0; }

// Unless LEANTRAIN_CUDNN_CONV_GRAPH=0, runs the pass through conv_graph.h's kept plan (x, w, y are
// the operands in the pass's roles, as conv_graph_run takes them); false: the caller runs the
// legacy API (the knob is off, or cuDNN has no fitting plan).
bool ran_by_graph(HostTimer& timer, ConvGraphPass pass, DType dt, const Tensor& x, const Tensor& w, const Tensor& y,
                  const Conv2dDesc& d, const Tensor& workspace, int64_t bytes, int dev) {
  static const bool on = knob_on("LEANTRAIN_CUDNN_CONV_GRAPH");
  if (!on) return false;
  ConvGraphProblem p;
  p.pass = pass, p.dtype = dt, p.d = d, p.workspace_bytes = bytes, p.device = dev;
  p.x = image_dims(x.shape(), d.channels_last), p.w = image_dims(w.shape(), d.channels_last);
  p.y = image_dims(y.shape(), d.channels_last);
  p.deterministic = pass != ConvGraphPass::Forward;
  p.allow_tf32 = cuda_allow_tf32();
  return timer.cudnn([&] { return conv_graph_run(p, x.raw_data(), w.raw_data(), y.raw_data(), ws_ptr(workspace)); });
}

void check_operand(const Tensor& t, DType dt, int dev, const char* op, const char* name) {
  LT_CHECK(t.defined() && t.dim() == 4 && t.is_contiguous() && t.dtype() == dt && t.device() == Device::cuda(dev),
           std::string(op) + ": " + name + " must be a contiguous 4-D " + dtype_name(dt) + " tensor on cuda:" +
               std::to_string(dev),
           "cuDNN reads the images (NCHW, or NHWC when channels_last) densely", "");
}

// y += bias[o], o the channel of element i: (i / inner) % channels, where inner is OH * OW for
// NCHW and 1 for NHWC.
template <class T> __global__ void add_bias_kernel(T* y, const T* b, int64_t n, int64_t inner, int64_t channels) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    store_t(y, i, load_t(y, i) + load_t(b, (i / inner) % channels));
}

// db[o] = the sum of dy[:, o, :], one block per channel, a fixed order.
template <class T> __global__ void bias_grad_kernel(T* db, const T* dy, int64_t batch, int64_t hw, int64_t channels) {
  const int64_t o = blockIdx.x;
  float s = 0;
  for (int64_t i = threadIdx.x; i < batch * hw; i += blockDim.x) {
    const int64_t n = i / hw;
    s += load_t(dy, (n * channels + o) * hw + (i - n * hw));
  }
  s = block_sum(s);
  if (threadIdx.x == 0) store_t(db, o, s);
}

// NHWC: db = the column sums of dy [rows, channels]. A block owns kBiasCols adjacent channels
// (the lanes of a warp: each row's read is coalesced) and kBiasPhases row phases (the warps);
// each thread sums its rows in order, then one thread per channel adds the phases in order.
constexpr int kBiasCols = 32, kBiasPhases = 32;
template <class T>
__global__ void bias_grad_nhwc_kernel(T* db, const T* dy, int64_t rows, int64_t channels) {
  __shared__ float part[kBiasPhases][kBiasCols + 1];
  const int64_t o = int64_t(blockIdx.x) * kBiasCols + threadIdx.x;
  float s = 0;
  if (o < channels)
    for (int64_t r = threadIdx.y; r < rows; r += kBiasPhases) s += load_t(dy, r * channels + o);
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y != 0 || o >= channels) return;
  s = 0;
  for (int p = 0; p < kBiasPhases; ++p) s += part[p][threadIdx.x];
  store_t(db, o, s);
}

}  // namespace

void CudaBackend::conv2d_fwd(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias,
                             const Conv2dDesc& d, const Tensor& workspace) {
  const DType dt = y.dtype();
  HostTimer timer(int(Pass::Forward));
  for (auto [t, name] : {std::pair{&y, "y"}, {&x, "x"}, {&w, "w"}}) check_operand(*t, dt, device_index_, "conv2d_fwd", name);
  if (y.numel() == 0) return;
  const int64_t bytes = int64_t(ws_bytes(workspace));
  if (!ran_by_graph(timer, ConvGraphPass::Forward, dt, x, w, y, d, workspace, bytes, device_index_)) {
    const CudnnApi& api = cudnn();
    cudnnHandle_t h = cudnn_handle();
    const std::string key = key_of(Pass::Forward, x.shape(), w.shape(), d, dt, bytes, device_index_);
    const Prepared& pr = prepared(key, x.shape(), w.shape(), y.shape(), d, dt, [&](ConvDescs& c) {
      return choose<cudnnConvolutionFwdAlgoPerf_t>(
          c, dt, bytes, false, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
          [&](int req, int* n, cudnnConvolutionFwdAlgoPerf_t* p) {
            return api.cudnnGetConvolutionForwardAlgorithm_v7(h, c.x, c.w, c.conv, c.y, req, n, p);
          },
          [&](int algo, size_t* need) {
            return api.cudnnGetConvolutionForwardWorkspaceSize(h, c.x, c.w, c.conv, c.y,
                                                               cudnnConvolutionFwdAlgo_t(algo), need);
          },
          "forward");
    });
    const ConvDescs& c = *pr.descs;
    const Choice& ch = pr.choice;
    const float one = 1.0f, zero = 0.0f;
    LT_CUDNN_CHECK(timer.cudnn([&] {
      return api.cudnnConvolutionForward(h, &one, c.x, x.raw_data(), c.w, w.raw_data(), c.conv,
                                         cudnnConvolutionFwdAlgo_t(ch.algo), ws_ptr(workspace), ws_bytes(workspace),
                                         &zero, c.y, y.raw_data());
    }));
  }
  if (!bias.defined()) return;
  const ImageDims yd = image_dims(y.shape(), d.channels_last);
  const int64_t inner = d.channels_last ? 1 : yd.h * yd.w;
  dispatch_float(dt, [&](auto tag) {
    using T = decltype(tag);
    add_bias_kernel<T><<<grid_for(y.numel(), kThreads), kThreads, 0, current_stream()>>>(
        y.data<T>(), bias.data<T>(), y.numel(), inner, yd.c);
    LT_CUDA_LAUNCH_CHECK("add_bias_kernel");
  });
}

void CudaBackend::conv2d_bwd_data(const Tensor& dx, const Tensor& dy, const Tensor& w, const Conv2dDesc& d,
                                  const Tensor& workspace) {
  const DType dt = dx.dtype();
  HostTimer timer(int(Pass::BackwardData));
  for (auto [t, name] : {std::pair{&dx, "dx"}, {&dy, "dy"}, {&w, "w"}})
    check_operand(*t, dt, device_index_, "conv2d_bwd_data", name);
  if (dx.numel() == 0) return;
  const int64_t bytes = int64_t(ws_bytes(workspace));
  if (ran_by_graph(timer, ConvGraphPass::BackwardData, dt, dx, w, dy, d, workspace, bytes, device_index_)) return;
  const CudnnApi& api = cudnn();
  cudnnHandle_t h = cudnn_handle();
  const std::string key = key_of(Pass::BackwardData, dx.shape(), w.shape(), d, dt, bytes, device_index_);
  const Prepared& pr = prepared(key, dx.shape(), w.shape(), dy.shape(), d, dt, [&](ConvDescs& c) {
    return choose<cudnnConvolutionBwdDataAlgoPerf_t>(
        c, dt, bytes, true, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
        [&](int req, int* n, cudnnConvolutionBwdDataAlgoPerf_t* p) {
          return api.cudnnGetConvolutionBackwardDataAlgorithm_v7(h, c.w, c.y, c.conv, c.x, req, n, p);
        },
        [&](int algo, size_t* need) {
          return api.cudnnGetConvolutionBackwardDataWorkspaceSize(h, c.w, c.y, c.conv, c.x,
                                                                  cudnnConvolutionBwdDataAlgo_t(algo), need);
        },
        "backward-data");
  });
  const ConvDescs& c = *pr.descs;
  const Choice& ch = pr.choice;
  const float one = 1.0f, zero = 0.0f;
  LT_CUDNN_CHECK(timer.cudnn([&] {
    return api.cudnnConvolutionBackwardData(h, &one, c.w, w.raw_data(), c.y, dy.raw_data(), c.conv,
                                            cudnnConvolutionBwdDataAlgo_t(ch.algo), ws_ptr(workspace),
                                            ws_bytes(workspace), &zero, c.x, dx.raw_data());
  }));
}

void CudaBackend::conv2d_bwd_filter(const Tensor& dw, const Tensor& db, const Tensor& dy, const Tensor& x,
                                    const Conv2dDesc& d, const Tensor& workspace) {
  const DType dt = dy.dtype();
  HostTimer timer(int(Pass::BackwardFilter));
  for (auto [t, name] : {std::pair{&dw, "dw"}, {&dy, "dy"}, {&x, "x"}})
    check_operand(*t, dt, device_index_, "conv2d_bwd_filter", name);
  if (dy.numel() == 0) return;
  const int64_t bytes = int64_t(ws_bytes(workspace));
  if (!ran_by_graph(timer, ConvGraphPass::BackwardFilter, dt, x, dw, dy, d, workspace, bytes, device_index_)) {
    const CudnnApi& api = cudnn();
    cudnnHandle_t h = cudnn_handle();
    const std::string key = key_of(Pass::BackwardFilter, x.shape(), dw.shape(), d, dt, bytes, device_index_);
    const Prepared& pr = prepared(key, x.shape(), dw.shape(), dy.shape(), d, dt, [&](ConvDescs& c) {
      return choose<cudnnConvolutionBwdFilterAlgoPerf_t>(
          c, dt, bytes, true, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
          [&](int req, int* n, cudnnConvolutionBwdFilterAlgoPerf_t* p) {
            return api.cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, c.x, c.y, c.conv, c.w, req, n, p);
          },
          [&](int algo, size_t* need) {
            return api.cudnnGetConvolutionBackwardFilterWorkspaceSize(h, c.x, c.y, c.conv, c.w,
                                                                      cudnnConvolutionBwdFilterAlgo_t(algo), need);
          },
          "backward-filter");
    });
    const ConvDescs& c = *pr.descs;
    const Choice& ch = pr.choice;
    const float one = 1.0f, zero = 0.0f;
    LT_CUDNN_CHECK(timer.cudnn([&] {
      return api.cudnnConvolutionBackwardFilter(h, &one, c.x, x.raw_data(), c.y, dy.raw_data(), c.conv,
                                                cudnnConvolutionBwdFilterAlgo_t(ch.algo), ws_ptr(workspace),
                                                ws_bytes(workspace), &zero, c.w, dw.raw_data());
    }));
  }
  if (!db.defined()) return;
  const ImageDims yd = image_dims(dy.shape(), d.channels_last);
  dispatch_float(dt, [&](auto tag) {
    using T = decltype(tag);
    if (d.channels_last) {
      const unsigned blocks = unsigned((yd.c + kBiasCols - 1) / kBiasCols);
      bias_grad_nhwc_kernel<T><<<blocks, dim3(kBiasCols, kBiasPhases), 0, current_stream()>>>(
          db.data<T>(), dy.data<T>(), yd.n * yd.h * yd.w, yd.c);
      LT_CUDA_LAUNCH_CHECK("bias_grad_nhwc_kernel");
      return;
    }
    bias_grad_kernel<T><<<unsigned(yd.c), kThreads, 0, current_stream()>>>(db.data<T>(), dy.data<T>(), yd.n,
                                                                           yd.h * yd.w, yd.c);
    LT_CUDA_LAUNCH_CHECK("bias_grad_kernel");
  });
}

}  // namespace lt
