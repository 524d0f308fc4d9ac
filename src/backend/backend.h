// The kernel interface every backend implements. Op front-ends (src/ops/) validate shapes,
// allocate every output through the allocator, then call one of these; so the allocation
// sequence is the same on every backend by construction, and a backend never allocates
// tensors itself. The ops themselves are listed once, in backend_ops.def (with their
// conventions); this file holds their argument types and the Backend class generated from it.
#pragma once
#include <cstdint>
#include <span>

#include "leantrain/tensor.h"

namespace lt {

enum class BinaryOp : uint8_t { Add, Sub, Mul, Div };

enum class UnaryOp : uint8_t {
  Scale,      // x * alpha
  AddScalar,  // x + alpha
  Neg, Exp, Log, Sqrt, Rsqrt, Square, Tanh, Sigmoid, Relu,
  GeluTanh,   // 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3)))
  GeluErf,    // 0.5x(1+erf(x/sqrt2))
  Silu,       // x*sigmoid(x)
  PowScalar,  // x^alpha
  LogSigmoid, // log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)), exact for large |x|
};

enum class RandomKind : uint8_t { Normal, Uniform };

// The largest rope table (inv_freq, D/2 values): head dims up to 512. The CUDA kernel takes the
// table by value as a kernel argument, so rope needs no device memory of its own.
inline constexpr int64_t kRopeMaxHalf = 256;

// Row-major GEMM, batched: C[i] = alpha * op(A[i]) @ op(B[i]) + beta * C[i] (+ bias[n]).
// op(A) is M×K (A stored M×K, or K×M when trans_a); op(B) is K×N (stored K×N, or N×K when trans_b).
// Batch strides are in elements; 0 broadcasts one matrix over the batch. lda, ldb, ldc are the
// row strides of the stored matrices (0: packed, the stored row length): a padded row (a
// multiple of 16 bytes) keeps every row of an odd width aligned for the tensor cores. The
// tensors passed are views whose rows lie that far apart (stride 1 along a row).
struct GemmDesc {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  float alpha = 1.0f, beta = 0.0f;

  int64_t ld_a() const { return lda ? lda : (trans_a ? m : k); }
  int64_t ld_b() const { return ldb ? ldb : (trans_b ? k : n); }
  int64_t ld_c() const { return ldc ? ldc : n; }
};

// 2-D convolution, dilation 1, groups 1: x [N, C, H, W] and w [O, C, KH, KW] give y [N, O, OH,
// OW] with OH = (H + 2 pad_h - KH) / stride_h + 1 (OW likewise). channels_last: every operand
// is stored NHWC instead, x [N, H, W, C], w [O, KH, KW, C], y [N, OH, OW, O].
struct Conv2dDesc {
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  bool channels_last = false;
};

// 2-D pooling window: OH = (H + 2 pad_h - kernel_h) / stride_h + 1 (no ceil mode, dilation 1).
// channels_last: x [N, H, W, C], y and indices [N, OH, OW, C].
struct Pool2dDesc {
  int64_t kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  bool channels_last = false;
};

// channels_last: x [N, H, W, C], i.e. rows [N H W, C] normalised per column.
struct BatchNormArgs {
  bool training = true;
  float momentum = 0.1f, eps = 1e-5f;
  bool channels_last = false;
  bool relu = false;  // y = relu(norm(x)) (batch_norm_relu); the backward then masks dy by y > 0
};

// An image tensor's dims by meaning, whichever order it is stored in.
struct ImageDims {
  int64_t n, c, h, w;
};
inline ImageDims image_dims(const Shape& s, bool channels_last) {
  return channels_last ? ImageDims{s[0], s[3], s[1], s[2]} : ImageDims{s[0], s[1], s[2], s[3]};
}

// A channels-last batch norm's f32 scratch on the GPU: [2, G, C] per-chunk partial sums of G
// chunks of the N H W rows, G from the row count alone (so a dry run allocates the same bytes).
inline int64_t batchnorm_row_chunks(int64_t rows) {
  const int64_t g = (rows + 255) / 256;
  return g < 1 ? 1 : (g > 256 ? 256 : g);
}

// Stochastic rounding of 16-bit parameter stores (Optimizer::set_stochastic_rounding). Empty:
// round to nearest, as always. Else one stream (random.h sr_stream) per parameter of the call,
// and element i of a bf16/f16 parameter is stored as sr_round_bf16/f16(the f32 update,
// rng_bits32(streams[k], i)); f32/f64 parameters ignore it.
struct StochasticRounding {
  std::span<const uint64_t> streams;
};

struct AdamWArgs {
  float lr, beta1, beta2, eps, weight_decay;
  int64_t step;              // 1-based, for bias correction
  float grad_scale = 1.0f;   // gradients are multiplied by this first (unscaling, clipping)
  StochasticRounding sr{};
  // Empty, or one entry a parameter: undefined, or a contiguous bf16/f16 tensor of the parameter's
  // size that receives the updated f32 parameter rounded to nearest (a kept cast, the same bits
  // as cast()), written by the update itself.
  std::span<const Tensor> kept{};
  // Defined (f32 [1], on the parameters' device; the trainer's unclipped step): the update also
  // adds the sum of squares of the gradients as passed (before grad_scale) into it, in a fixed
  // order, and leaves every element whose gradient is not finite as it was (parameter, moments,
  // kept cast), so the step's norm comes from the update's own read of the gradients.
  Tensor sumsq{};
};

struct SgdArgs {
  float lr, momentum, dampening, weight_decay;
  bool nesterov;
  bool first_step;           // momentum buffer is initialised with the gradient
  float grad_scale = 1.0f;
  StochasticRounding sr{};
};

// Lion (Chen et al. 2023), with g = grad * grad_scale:
//   p = p * (1 - lr*wd) - lr * sign(b1*m + (1-b1)*g);  m = b2*m + (1-b2)*g
struct LionArgs {
  float lr, beta1, beta2, weight_decay;
  float grad_scale = 1.0f;
  StochasticRounding sr{};
};

// An 8-bit block-wise optimizer state (see backend/quant8.h): per tensor, u8 codes of the
// parameter's size and f32 absmax [ceil(n / 256)]; element i is map[codes[i]] * absmax[i / 256].
// `map` points to 256 sorted floats in host memory (the optimizer's dynamic map).
struct QuantState {
  std::span<const Tensor> codes, absmax;
  const float* map = nullptr;
};

// One enumerator per op of backend_ops.def, and the name table (meta's per-op choices, tests).
enum class BackendOp : uint8_t {
#define LT_BACKEND_OP(group, ret, op, params, args) op,
#include "backend/backend_ops.def"
};

struct BackendOpInfo {
  const char* group;
  const char* name;
};

inline constexpr BackendOpInfo kBackendOps[] = {
#define LT_BACKEND_OP(group, ret, op, params, args) {#group, #op},
#include "backend/backend_ops.def"
};

class Backend {
 public:
  virtual ~Backend() = default;
  // "cpu", "cuda", "meta": names the backend in errors.
  virtual const char* name() const = 0;

  // Every op of backend_ops.def. Its default throws lt::Error "backend 'X' has no op 'Y'"
  // (backend.cpp): a backend implements an op by overriding it.
#define LT_BACKEND_OP(group, ret, op, params, args) virtual ret op params;
#include "backend/backend_ops.def"

  // Waits until every stream of the device has finished its work (cpu and meta: nothing to wait for).
  virtual void synchronize() {}

  // --- streams and events ---
  // Ops and copies go to the calling thread's current stream (StreamGuard, memory/streams.h;
  // the compute stream unless set). cpu and meta have finished an op when it returns, so their
  // events are null handles: complete once recorded, waits return at once. Code uses these
  // through Event (backend/event.h), which also tells the caching allocator the stream order.
  virtual void* create_event() { return nullptr; }
  virtual void destroy_event(void*) noexcept {}
  virtual void record_event(void*) {}              // on the current stream, after the work enqueued so far
  virtual bool event_done(void*) { return true; }  // non-blocking
  virtual void wait_event(void*) {}                // blocks the calling thread until done
  virtual void stream_wait_event(void*) {}         // the current stream waits; the host does not
  // The current stream's handle (a cudaStream_t on CUDA) for libraries that enqueue work on it
  // (NCCL); nullptr on cpu and meta.
  virtual void* native_stream() { return nullptr; }

  // --- host staging (the data loader, activation offload; allocate_pinned_host in leantrain/memory.h gives the memory) ---
  // Enqueues dst <- src (dst contiguous, raw bytes, src pinned) on the current stream without
  // waiting for it; cpu copies now, meta does nothing. src must stay unchanged until an event
  // recorded after the copy has completed.
  virtual void copy_from_host_async(const Tensor& dst, const void* src) { copy_from_host(dst, src); }
  // Enqueues dst <- src (src contiguous, dst pinned) on the current stream without waiting for it
  // (activation offload); cpu copies now, meta does nothing. dst may be read, and src's memory
  // reused by another stream, only after an event recorded after the copy (record_stream).
  virtual void copy_to_host_async(void* dst, const Tensor& src) { copy_to_host(dst, src); }
};

Backend& backend_for(Device d);

}  // namespace lt
