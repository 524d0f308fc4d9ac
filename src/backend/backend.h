// The kernel interface every backend implements. Op front-ends (src/ops/) validate shapes,
// allocate every output through the allocator, then call one of these; so the allocation
// sequence is the same on every backend by construction, and a backend never allocates
// tensors itself. `meta` implements all of them as no-ops.
//
// Conventions: outputs are preallocated and contiguous unless noted; inputs are contiguous
// unless noted; floating storage may be f32, f64 (CPU only), f16 or bf16 with f32 accumulation
// (f64 on f64). Auxiliary statistics (mean, rstd, lse, losses) are always f32 (f64 when the
// inputs are f64, so gradchecks stay exact).
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
};

enum class RandomKind : uint8_t { Normal, Uniform };

// Row-major GEMM, batched: C[i] = alpha * op(A[i]) @ op(B[i]) + beta * C[i] (+ bias[n]).
// op(A) is M×K (A stored M×K, or K×M when trans_a); op(B) is K×N (stored K×N, or N×K when trans_b).
// Batch strides are in elements; 0 broadcasts one matrix over the batch.
struct GemmDesc {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  float alpha = 1.0f, beta = 0.0f;
};

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

class Backend {
 public:
  virtual ~Backend() = default;

  // --- data movement ---
  virtual void fill(const Tensor& out, double value) = 0;
  // dst and src: same shape, any strides (dst may be a strided view), dtype cast allowed.
  virtual void copy(const Tensor& dst, const Tensor& src) = 0;
  virtual void copy_from_host(const Tensor& dst, const void* src) = 0;  // dst contiguous, raw bytes
  virtual void copy_to_host(void* dst, const Tensor& src) = 0;          // src contiguous, raw bytes
  virtual void fill_random(const Tensor& out, RandomKind kind, float a, float b, uint64_t seed, uint64_t offset) = 0;
  virtual void synchronize() {}

  // --- host staging (the data loader) ---
  // Host memory that copy_from_host_async may read after it returned: page-locked on CUDA
  // (cudaHostAlloc), ordinary memory on cpu and meta. nullptr when it cannot be had (pinned
  // memory is limited); the caller then uses pageable memory and copy_from_host. No device
  // allocation is made, so allocation traces do not change. Free with free_staging.
  virtual void* alloc_staging(int64_t nbytes);
  virtual void free_staging(void* p) noexcept;
  // An event for copy_from_host_async (nullptr on backends whose copies are synchronous).
  virtual void* create_copy_event() { return nullptr; }
  virtual void destroy_copy_event(void*) noexcept {}
  // Enqueues dst <- src (dst contiguous, raw bytes, src from alloc_staging) on the compute stream
  // without waiting for it; cpu copies now, meta does nothing. src must stay unchanged until an
  // event recorded after the copy has completed.
  virtual void copy_from_host_async(const Tensor& dst, const void* src) { copy_from_host(dst, src); }
  // Records `event` on the compute stream after the work enqueued so far.
  virtual void record_copy_event(void*) {}
  virtual bool copy_event_done(void*) { return true; }  // non-blocking
  virtual void wait_copy_event(void*) {}                // blocks the calling thread until done

  // --- elementwise ---
  // a and b carry out's shape, with stride 0 on broadcast dimensions; out may alias a.
  virtual void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) = 0;
  virtual void unary(UnaryOp op, const Tensor& out, const Tensor& x, float alpha) = 0;
  // dx = dy * d op(x)/dx
  virtual void unary_backward(UnaryOp op, const Tensor& dx, const Tensor& dy, const Tensor& x, float alpha) = 0;
  // out = x * keep / (1 - p), keep = rng_uniform(seed, offset + i) >= p
  virtual void dropout(const Tensor& out, const Tensor& x, float p, uint64_t seed, uint64_t offset) = 0;

  // --- reductions ---
  // out has in's rank with size 1 on reduced dims; sums over those dims (accumulating in f32/f64).
  virtual void reduce_sum(const Tensor& out, const Tensor& in) = 0;
  virtual void argmax_lastdim(const Tensor& out_i64, const Tensor& x) = 0;
  // out (f32 [1]) += sum of squares of each tensor (grad clipping, overflow checks).
  virtual void sum_squares(const Tensor& out, std::span<const Tensor> xs) = 0;

  // --- matrix products ---
  virtual void gemm(const Tensor& c, const Tensor& a, const Tensor& b, const GemmDesc& d, const Tensor& bias) = 0;

  // --- normalisation, softmax ---
  // x [N, C]; w, b [C] (b may be undefined); mean, rstd [N].
  virtual void layernorm_fwd(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                             const Tensor& w, const Tensor& b, float eps) = 0;
  // dw, db may be undefined (not needed); written, not accumulated.
  virtual void layernorm_bwd(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dy,
                             const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd) = 0;
  virtual void rmsnorm_fwd(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& w, float eps) = 0;
  virtual void rmsnorm_bwd(const Tensor& dx, const Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w,
                           const Tensor& rstd) = 0;
  // Residual add fused with the norm: sum = x + r (rounded to the storage type), then the norm
  // of that stored sum as above. x, r, sum [N, C]. Backward: dsum = ds + the norm's dx, where
  // ds (the incoming gradient of sum) may be undefined; dw, db as in the unfused backward.
  virtual void add_layernorm_fwd(const Tensor& sum, const Tensor& y, const Tensor& mean, const Tensor& rstd,
                                 const Tensor& x, const Tensor& r, const Tensor& w, const Tensor& b, float eps) = 0;
  virtual void add_layernorm_bwd(const Tensor& dsum, const Tensor& dw, const Tensor& db, const Tensor& dy,
                                 const Tensor& ds, const Tensor& sum, const Tensor& w, const Tensor& mean,
                                 const Tensor& rstd) = 0;
  virtual void add_rmsnorm_fwd(const Tensor& sum, const Tensor& y, const Tensor& rstd, const Tensor& x,
                               const Tensor& r, const Tensor& w, float eps) = 0;
  virtual void add_rmsnorm_bwd(const Tensor& dsum, const Tensor& dw, const Tensor& dy, const Tensor& ds,
                               const Tensor& sum, const Tensor& w, const Tensor& rstd) = 0;
  virtual void softmax_fwd(const Tensor& y, const Tensor& x) = 0;  // over the last dim
  virtual void softmax_bwd(const Tensor& dx, const Tensor& dy, const Tensor& y) = 0;

  // --- attention ---
  // q [B,H,Tq,D], k/v [B,H,Tk,D], out [B,H,Tq,D], lse [B,H,Tq]. mask: u8 [B,Tk], 1 = attend, or
  // undefined. Causal aligns the last query with the last key (query i sees keys <= i + Tk - Tq).
  // q, k, v, out, dq, dk, dv, dout may be strided views (stride 1 on D, any batch/head/time
  // strides: e.g. heads of a packed [B, T, 3C] qkv); outputs must not overlap each other or the
  // inputs. lse and mask are contiguous.
  virtual void attention_fwd(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                             const Tensor& v, const Tensor& mask, bool causal, float scale) = 0;
  virtual void attention_bwd(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                             const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                             const Tensor& lse, const Tensor& mask, bool causal, float scale) = 0;

  // --- embeddings ---
  // ids i32/i64 [N] (validated by the front-end), weight [V, C], out [N, C].
  virtual void embedding_fwd(const Tensor& out, const Tensor& ids, const Tensor& weight) = 0;
  virtual void embedding_bwd(const Tensor& dweight, const Tensor& dout, const Tensor& ids) = 0;  // dweight zeroed
  // x [B,H,T,D], rotate-half convention: pairs (i, i + D/2), angle = (pos_offset + t) * base^(-2i/D).
  // inverse rotates by the negative angle (the backward).
  virtual void rope(const Tensor& out, const Tensor& x, float base, int64_t pos_offset, bool inverse) = 0;

  // --- loss ---
  // logits [N, V], targets i64 [N]; loss [N] (0 where ignored), lse [N].
  virtual void cross_entropy_fwd(const Tensor& loss, const Tensor& lse, const Tensor& logits, const Tensor& targets,
                                 int64_t ignore_index) = 0;
  // dlogits = (softmax - onehot) * dloss[row] (0 where ignored); dloss f32 [N].
  virtual void cross_entropy_bwd(const Tensor& dlogits, const Tensor& dloss, const Tensor& logits,
                                 const Tensor& lse, const Tensor& targets, int64_t ignore_index) = 0;

  // --- optimizers: one call updates every tensor of the group ---
  virtual void adamw_step(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> m,
                          std::span<const Tensor> v, const AdamWArgs& args) = 0;
  // momentum_bufs may be empty when momentum == 0.
  virtual void sgd_step(std::span<const Tensor> params, std::span<const Tensor> grads,
                        std::span<const Tensor> momentum_bufs, const SgdArgs& args) = 0;
  // m may be f32/bf16/f16 (bf16 states).
  virtual void lion_step(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> m,
                         const LionArgs& args) = 0;
  // 8-bit states: each step dequantises, updates in f32 (as adamw_step / lion_step), then
  // requantises every 256-element block against its new absmax (nearest code of the map).
  virtual void adamw8bit_step(std::span<const Tensor> params, std::span<const Tensor> grads, const QuantState& m,
                              const QuantState& v, const AdamWArgs& args) = 0;
  virtual void lion8bit_step(std::span<const Tensor> params, std::span<const Tensor> grads, const QuantState& m,
                             const LionArgs& args) = 0;
};

Backend& backend_for(Device d);

}  // namespace lt
