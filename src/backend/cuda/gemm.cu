// GEMM through cuBLASLt. cuBLASLt is column-major; a row-major C = op(A) op(B) is the
// column-major C^T = op(B)^T op(A)^T, so our b is cuBLASLt's "A" and our a its "B", and no data
// moves. f32 runs in plain FP32 (no TF32 unless cuda_set_allow_tf32(true)) so it matches the
// CPU to ~1e-5; f16/bf16 accumulate in f32. Bias and GELU are fused as epilogues.
// The 32 MiB workspace comes from the caching allocator once per device (category workspace),
// so every GPU byte leantrain uses is counted. Algorithms are chosen by cuBLASLt's heuristic
// once per problem (shape, dtype, layout, alignment) and cached.
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_gemm.h"
#include "core/knobs.h"
#include "leantrain/cuda_info.h"
#include "memory/streams.h"

namespace lt {

namespace {

std::atomic<bool> g_allow_tf32{false};

std::mutex g_mu;  // guards the workspaces and the algorithm cache
std::array<Tensor*, 64> g_workspace{};
std::map<std::string, cublasLtMatmulAlgo_t> g_algos;
// Backward-epilogue problems cuBLASLt had no algorithm for (their callers run the product and
// the epilogue apart): asked once, not at every step.
std::set<std::string> g_no_epilogue_algo;

// The device's workspace of gemm_workspace_bytes(), allocated at its first GEMM and kept (never
// freed) by the backend; made again if a later run of the process asks for another size. None
// (nullptr) for 0.
void* workspace(int dev) {
  std::lock_guard<std::mutex> g(g_mu);
  Tensor*& w = g_workspace[size_t(dev)];
  const int64_t bytes = gemm_workspace_bytes();
  if (w && w->numel() != bytes) {
    delete w;
    w = nullptr;
  }
  if (!w && bytes > 0) {
    MemoryCategoryScope cat(Category::Workspace);
    OpNameScope name("cublaslt_workspace");
    w = new Tensor(Tensor::empty({bytes}, DType::U8, Device::cuda(dev)));
  }
  return w ? w->raw_data() : nullptr;
}

struct Desc {
  cublasLtMatmulDesc_t d = nullptr;
  ~Desc() { if (d) cublasLtMatmulDescDestroy(d); }
};
struct Layout {
  cublasLtMatrixLayout_t l = nullptr;
  ~Layout() { if (l) cublasLtMatrixLayoutDestroy(l); }
};
struct Pref {
  cublasLtMatmulPreference_t p = nullptr;
  ~Pref() { if (p) cublasLtMatmulPreferenceDestroy(p); }
};

template <class V> void set_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const V& v) {
  LT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, a, &v, sizeof(V)));
}

// A column-major rows x cols matrix with leading dimension ld, batched with an element stride.
void make_layout(Layout& out, cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                 int64_t stride) {
  LT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&out.l, t, uint64_t(rows), uint64_t(cols), ld));
  if (batch > 1) {
    const int32_t count = int32_t(batch);
    LT_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(out.l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
    LT_CUBLAS_CHECK(
        cublasLtMatrixLayoutSetAttribute(out.l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
  }
}

// Largest power of two (<= 256) dividing the address and the batch stride in bytes.
uint32_t alignment(const void* p, int64_t stride_bytes) {
  const uint64_t v = reinterpret_cast<uint64_t>(p) | uint64_t(stride_bytes) | 256u;
  return uint32_t(v & (~v + 1));
}

// Elements from a view's first element to its last, inclusive: numel for a contiguous tensor,
// more for rows padded apart.
int64_t extent(const Tensor& t) {
  if (t.numel() == 0) return 0;
  int64_t e = 1;
  for (size_t d = 0; d < t.shape().size(); ++d) e += (t.shape()[d] - 1) * t.strides()[d];
  return e;
}

// Contiguous, or rows of stride 1 whose leading dims are packed over a row stride `ld` (the
// GemmDesc's; 0 when the operand is packed): what the product reads.
bool row_layout(const Tensor& t, int64_t ld) {
  if (t.is_contiguous()) return true;
  if (ld == 0 || t.dim() < 2) return false;
  int64_t expect = 1;
  for (size_t i = t.shape().size(); i-- > 0;) {
    if (t.shape()[i] == 1) continue;
    if (t.strides()[i] != expect) return false;
    expect = i + 1 == t.shape().size() ? ld : expect * t.shape()[i];
  }
  return true;
}

void check_operand(const Tensor& t, int dev, const char* name, DType dt, int64_t need, int64_t ld = 0) {
  LT_CHECK(t.defined() && t.device() == Device::cuda(dev), std::string("gemm: ") + name + " is not on cuda:" +
                                                               std::to_string(dev),
           t.defined() ? "it is on " + t.device().str() : "it is undefined", "move it with .to()");
  LT_CHECK(t.dtype() == dt, std::string("gemm: ") + name + " is " + dtype_name(t.dtype()),
           std::string("the output is ") + dtype_name(dt), "cast the operands to one dtype");
  LT_CHECK(row_layout(t, ld), std::string("gemm: ") + name + " must be contiguous or rows " + std::to_string(ld) + " apart",
           "got strides " + shape_str(t.strides()) + " for shape " + shape_str(t.shape()), "call contiguous() first");
  LT_CHECK(extent(t) >= need, std::string("gemm: ") + name + " is too small for the described product",
           "needs " + std::to_string(need) + " elements, spans " + std::to_string(extent(t)) + " " + shape_str(t.shape()),
           "check m, n, k, batch, strides and leading dimensions");
}

// The backward epilogues (gemm_bgrad, gemm_dgelu): at most one of them per product.
struct BackwardEpilogue {
  Tensor bgrad;             // bias gradient output: BGRADA (of b) or BGRADB (of a)
  bool bgrad_of_b = false;
  Tensor dgelu_pre;         // DGELU: the GELU's input, read as the epilogue's aux
  bool any() const { return bgrad.defined() || dgelu_pre.defined(); }
};

// False only when `back` asks for an epilogue cuBLASLt has no algorithm for (the caller then
// runs the product and the epilogue's work apart); every other failure throws.
bool run_gemm(int dev, const Tensor& c, const Tensor& a, const Tensor& b, GemmDesc d, const Tensor& bias, bool gelu,
              const Tensor& aux, const BackwardEpilogue& back = {});

// LEANTRAIN_GEMM_TUNE=1 (an experiment, off by default): each new product shape times up to 8 of
// cuBLASLt's heuristic candidates and keeps the fastest, printing one line per candidate to
// stderr. Off, the heuristic's first choice is kept: the same kernel every run.
bool gemm_tune_mode() {
  static const bool on = knob_on("LEANTRAIN_GEMM_TUNE");
  return on;
}

// Times `run(algo, scratch)` for each candidate (one warm-up, then the best of 3) into a scratch
// output of `out_bytes` (so an accumulating product's c is read, never written), and returns the
// index of the fastest. Epilogue outputs (aux, bias gradients) are overwritten by the real run.
template <class Run>
int fastest_candidate(const char* key, const cublasLtMatmulHeuristicResult_t* cands, int n, Run&& run,
                      size_t out_bytes) {
  void* scratch = nullptr;
  if (cudaMalloc(&scratch, out_bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaStream_t st = cuda::current_stream();
  int best = -1;
  float best_ms = 0;
  for (int i = 0; i < n; ++i) {
    if (cands[i].state != CUBLAS_STATUS_SUCCESS || run(cands[i].algo, scratch) != CUBLAS_STATUS_SUCCESS) continue;
    float ms = 1e30f;
    for (int r = 0; r < 3; ++r) {
      cudaEventRecord(e0, st);
      run(cands[i].algo, scratch);
      cudaEventRecord(e1, st);
      cudaEventSynchronize(e1);
      float t = 0;
      cudaEventElapsedTime(&t, e0, e1);
      ms = std::min(ms, t);
    }
    int tile = 0, stages = 0, splitk = 0, swizzle = 0, cta = 0;
    size_t w = 0;
    cublasLtMatmulAlgoConfigGetAttribute(&cands[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &w);
    cublasLtMatmulAlgoConfigGetAttribute(&cands[i].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, &w);
    cublasLtMatmulAlgoConfigGetAttribute(&cands[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk, &w);
    cublasLtMatmulAlgoConfigGetAttribute(&cands[i].algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swizzle, sizeof swizzle, &w);
    cublasLtMatmulAlgoConfigGetAttribute(&cands[i].algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cta, sizeof cta, &w);
    std::fprintf(stderr, "gemm-tune %s | cand %d tile %d stages %d splitk %d swizzle %d cluster %d ws %zu : %.1f us\n",
                 key, i, tile, stages, splitk, swizzle, cta, cands[i].workspaceSize, ms * 1e3);
    if (best < 0 || ms < best_ms) best = i, best_ms = ms;
  }
  if (best < 0) best = 0;
  std::fprintf(stderr, "gemm-tune %s | chose %d\n", key, best);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaStreamSynchronize(st);
  cudaFree(scratch);
  return best;
}

// cuBLASLt's kernels address an operand with 32-bit offsets: GPT-2's logits for 64 x 1024 tokens
// (3.3e9 elements) fault with an illegal address. A product with an operand spanning more than
// 2^31 - 1 elements runs as several: blocks of m rows (c and a untransposed shrink with them), or
// else blocks of k accumulated with beta = 1 (a transposed, as in a weight gradient; no epilogue).
// Returns false when the product is small enough to run as one.
bool split_large(int dev, const Tensor& c, const Tensor& a, const Tensor& b, const GemmDesc& d, const Tensor& bias,
                 bool gelu, const Tensor& aux) {
  constexpr int64_t kMaxSpan = (int64_t(1) << 31) - 1;
  const int64_t lda = d.ld_a(), ldb = d.ld_b(), ldc = d.ld_c();
  const int64_t span_c = (d.m - 1) * ldc + d.n;
  const int64_t span_a = d.trans_a ? (d.k - 1) * lda + d.m : (d.m - 1) * lda + d.k;
  const int64_t span_b = d.trans_b ? (d.n - 1) * ldb + d.k : (d.k - 1) * ldb + d.n;
  if (span_c <= kMaxSpan && span_a <= kMaxSpan && span_b <= kMaxSpan) return false;
  auto part = [](const Tensor& t, int64_t at, int64_t len) { return make_view(t, {len}, {1}, t.impl()->offset + at); };
  GemmDesc p = d;
  p.lda = lda, p.ldb = ldb, p.ldc = ldc;
  const int64_t row = std::max(ldc, d.trans_a ? int64_t(1) : lda);  // elements a row of m adds to c (and a)
  if (!(d.trans_a && span_a > kMaxSpan) && span_b <= kMaxSpan) {
    const int64_t rows = std::max<int64_t>(1, (kMaxSpan - std::max(d.n, d.k)) / row);
    for (int64_t r0 = 0; r0 < d.m; r0 += rows) {
      p.m = std::min(rows, d.m - r0);
      const Tensor cp = part(c, r0 * ldc, (p.m - 1) * ldc + d.n);
      const Tensor ap = d.trans_a ? part(a, r0, (d.k - 1) * lda + p.m) : part(a, r0 * lda, (p.m - 1) * lda + d.k);
      run_gemm(dev, cp, ap, b, p, bias, gelu, aux.defined() ? part(aux, r0 * d.n, p.m * d.n) : Tensor());
    }
    return true;
  }
  LT_CHECK(!bias.defined() && !gelu && !aux.defined(), "gemm: an operand spans more than 2^31 elements",
           "a product split along k cannot apply a bias or GELU epilogue", "run the epilogue separately");
  const int64_t per_k = std::max({d.trans_a ? lda : int64_t(1), d.trans_b ? int64_t(1) : ldb, int64_t(1)});
  const int64_t ks = std::max<int64_t>(1, (kMaxSpan - std::max({d.m, d.n, span_c})) / per_k);
  LT_CHECK(span_c <= kMaxSpan, "gemm: the output spans more than 2^31 elements in both directions",
           "m = " + std::to_string(d.m) + ", n = " + std::to_string(d.n), "split the product");
  for (int64_t k0 = 0; k0 < d.k; k0 += ks) {
    p.k = std::min(ks, d.k - k0);
    p.beta = k0 == 0 ? d.beta : 1.0f;  // later blocks add to what the first wrote
    const Tensor ap = d.trans_a ? part(a, k0 * lda, (p.k - 1) * lda + d.m) : part(a, k0, (d.m - 1) * lda + p.k);
    const Tensor bp = d.trans_b ? part(b, k0, (d.n - 1) * ldb + p.k) : part(b, k0 * ldb, (p.k - 1) * ldb + d.n);
    run_gemm(dev, c, ap, bp, p, bias, gelu, aux);
  }
  return true;
}

bool run_gemm(int dev, const Tensor& c, const Tensor& a, const Tensor& b, GemmDesc d, const Tensor& bias, bool gelu,
              const Tensor& aux, const BackwardEpilogue& back) {
  LT_CHECK(d.batch >= 0 && d.m >= 0 && d.n >= 0 && d.k >= 0 && d.stride_a >= 0 && d.stride_b >= 0 &&
               d.stride_c >= 0,
           "gemm: negative size or stride", "batch, m, n, k and strides must be >= 0", "fix the GemmDesc");
  LT_CHECK(c.defined(), "gemm: c is undefined", "the output must be preallocated", "allocate it first");
  const DType dt = c.dtype();
  LT_CHECK(dt == DType::F32 || dt == DType::BF16 || dt == DType::F16, std::string("gemm: ") + dtype_name(dt) + " on CUDA",
           "CUDA GEMM takes f32, bf16 or f16", "cast the operands");
  // The operands' dtype: c's, or 16-bit into an f32 c (a weight gradient under autocast, with at
  // most a bias-gradient epilogue, its sums stored in f32 too).
  const DType it = a.defined() ? a.dtype() : dt;
  const bool widening = it != dt;
  LT_CHECK(!widening || (dt == DType::F32 && (it == DType::BF16 || it == DType::F16) && !bias.defined() && !gelu &&
                         !aux.defined() && !back.dgelu_pre.defined()),
           std::string("gemm: ") + dtype_name(it) + " operands into a " + dtype_name(dt) + " output",
           "only 16-bit operands into an f32 output, with no bias, GELU or DGELU epilogue",
           "cast the operands to the output's dtype");
  if (d.batch == 0 || d.m == 0 || d.n == 0) return true;
  const int64_t nb = d.batch - 1;
  const int64_t lda = d.ld_a(), ldb = d.ld_b(), ldc = d.ld_c();
  // Stored shapes (rows x row length): a is m x k (k x m when transposed), b is k x n (n x k).
  const int64_t a_rows = d.trans_a ? d.k : d.m, a_cols = d.trans_a ? d.m : d.k;
  const int64_t b_rows = d.trans_b ? d.n : d.k, b_cols = d.trans_b ? d.k : d.n;
  LT_CHECK(lda >= a_cols && ldb >= b_cols && ldc >= d.n, "gemm: a leading dimension is shorter than its row",
           "lda " + std::to_string(lda) + ", ldb " + std::to_string(ldb) + ", ldc " + std::to_string(ldc),
           "pass 0 (packed) or the row stride of the stored matrix");
  check_operand(c, dev, "c", dt, nb * d.stride_c + (d.m - 1) * ldc + d.n, d.ldc);
  check_operand(a, dev, "a", it, nb * d.stride_a + (a_rows - 1) * lda + a_cols, d.lda);
  check_operand(b, dev, "b", it, nb * d.stride_b + (b_rows - 1) * ldb + b_cols, d.ldb);
  if (bias.defined()) check_operand(bias, dev, "bias", dt, d.n);
  if (aux.defined()) {
    check_operand(aux, dev, "pre_gelu", dt, nb * d.stride_c + d.m * d.n);
    LT_CHECK(d.n % 8 == 0 && ldc == d.n, "gemm_gelu: pre_gelu output needs n % 8 == 0 and a packed c",
             "got n = " + std::to_string(d.n) + ", ldc = " + std::to_string(ldc),
             "pad the layer width to a multiple of 8 or skip the fused epilogue");
  }
  LT_CHECK(d.k > 0, "gemm: k = 0 is not supported on CUDA", "the product has no inner dimension",
           "check the operand shapes");
  // A shared b over a contiguous batch of a is one taller matrix: fold the batch into m.
  if (d.batch > 1 && d.stride_b == 0 && !d.trans_a && d.stride_a == d.m * lda && d.stride_c == d.m * ldc) {
    d.m *= d.batch;
    d.batch = 1;
  }
  if (back.any()) {
    LT_CHECK(d.batch == 1 && !bias.defined() && !gelu && !aux.defined() && d.beta == 0.0f,
             "gemm: a backward epilogue on a batched, biased or accumulating product", "it is not supported",
             "run the product and the epilogue apart");
    if (back.bgrad.defined()) check_operand(back.bgrad, dev, "bgrad", dt, back.bgrad_of_b ? d.n : d.m);
    if (back.dgelu_pre.defined()) check_operand(back.dgelu_pre, dev, "pre", dt, d.m * d.n);
  } else if (d.batch == 1 && split_large(dev, c, a, b, d, bias, gelu, aux)) {
    return true;
  }
  auto cuda_type = [](DType t) { return t == DType::F32 ? CUDA_R_32F : t == DType::BF16 ? CUDA_R_16BF : CUDA_R_16F; };
  const cudaDataType_t ct = cuda_type(dt), in_t = cuda_type(it);
  const cublasComputeType_t comp =
      it == DType::F32 && g_allow_tf32.load() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const cublasOperation_t op_a = d.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's A is our b
  const cublasOperation_t op_b = d.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's B is our a

  Desc desc;
  LT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc.d, comp, CUDA_R_32F));
  set_attr(desc.d, CUBLASLT_MATMUL_DESC_TRANSA, op_a);
  set_attr(desc.d, CUBLASLT_MATMUL_DESC_TRANSB, op_b);
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  if (gelu) epi = aux.defined() ? (bias.defined() ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
                                : (bias.defined() ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU);
  else if (bias.defined()) epi = CUBLASLT_EPILOGUE_BIAS;
  // cuBLASLt's A is our b: the gradient summed over k of our b is BGRADA's, of our a BGRADB's.
  if (back.bgrad.defined()) epi = back.bgrad_of_b ? CUBLASLT_EPILOGUE_BGRADA : CUBLASLT_EPILOGUE_BGRADB;
  if (back.dgelu_pre.defined()) epi = CUBLASLT_EPILOGUE_DGELU;
  set_attr(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE, epi);
  if (back.bgrad.defined()) set_attr(desc.d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, back.bgrad.raw_data());
  if (back.dgelu_pre.defined()) {
    set_attr(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, back.dgelu_pre.raw_data());
    set_attr(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t(d.n));
  }
  if (bias.defined()) {
    const void* bp = bias.raw_data();
    set_attr(desc.d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bp);
    set_attr(desc.d, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, int64_t(0));  // one bias for every batch
  }
  if (aux.defined()) {
    void* ap = aux.raw_data();
    set_attr(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, ap);
    set_attr(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t(d.n));
    set_attr(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, int64_t(d.batch > 1 ? d.stride_c : 0));
  }
  // Column-major views: b is n x k (ld ldb) or, transposed, k x n; a is k x m (ld lda) or, transposed,
  // m x k; c is n x m (ld ldc).
  Layout la, lb, lc;
  make_layout(la, in_t, d.trans_b ? d.k : d.n, d.trans_b ? d.n : d.k, ldb, d.batch, d.stride_b);
  make_layout(lb, in_t, d.trans_a ? d.m : d.k, d.trans_a ? d.k : d.m, lda, d.batch, d.stride_a);
  make_layout(lc, ct, d.n, d.m, ldc, d.batch, d.stride_c);

  // Each operand's alignment covers its base, its batch stride and its row stride: a row of an
  // odd length (GPT-2's 50257 logits) is what drops cuBLASLt to its align1 kernels.
  const int64_t es = int64_t(dtype_size(dt)), es_in = int64_t(dtype_size(it));
  const uint32_t al_a = alignment(b.raw_data(), (d.stride_b | ldb) * es_in);
  const uint32_t al_b = alignment(a.raw_data(), (d.stride_a | lda) * es_in);
  const uint32_t al_c = alignment(c.raw_data(), (d.stride_c | ldc) * es);
  const uint32_t al_bias = bias.defined() ? alignment(bias.raw_data(), 0) : 0;
  const uint32_t al_aux = aux.defined()              ? alignment(aux.raw_data(), d.stride_c * es)
                          : back.dgelu_pre.defined() ? alignment(back.dgelu_pre.raw_data(), 0)
                          : back.bgrad.defined()     ? alignment(back.bgrad.raw_data(), 0)
                                                     : 0;
  char key[320];
  std::snprintf(key, sizeof key, "%d|%d%d|%d|%d%d|%lld,%lld,%lld,%lld|%lld,%lld,%lld|%lld,%lld,%lld|%d|%u,%u,%u,%u,%u",
                dev, int(dt), int(it), int(comp), int(d.trans_a), int(d.trans_b), (long long)d.m, (long long)d.n,
                (long long)d.k, (long long)d.batch, (long long)d.stride_a, (long long)d.stride_b,
                (long long)d.stride_c, (long long)lda, (long long)ldb, (long long)ldc, int(epi), al_a, al_b, al_c,
                al_bias, al_aux);

  cuda::DeviceState& ds = cuda::device_state(dev);
  void* ws = workspace(dev);
  const uint64_t ws_bytes = uint64_t(gemm_workspace_bytes());
  // An algorithm chosen under a larger workspace may need it: the size is part of the key.
  const std::string cache_key = std::string(key) + "|ws" + std::to_string(ws_bytes);
  cublasLtMatmulAlgo_t algo;
  bool cached = false;
  {
    std::lock_guard<std::mutex> g(g_mu);
    auto it = g_algos.find(cache_key);
    if (it != g_algos.end()) { algo = it->second; cached = true; }
    else if (back.any() && g_no_epilogue_algo.count(cache_key)) return false;
  }
  if (!cached) {
    Pref pref;
    LT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref.p));
    LT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                         sizeof ws_bytes));
    const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligns[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, al_a},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, al_b},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, al_c},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, al_c}};
    for (const auto& [attr, v] : aligns)
      LT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.p, attr, &v, sizeof v));
    constexpr int kMaxCandidates = 8;
    cublasLtMatmulHeuristicResult_t cands[kMaxCandidates]{};
    int found = 0;
    const int want = gemm_tune_mode() ? kMaxCandidates : 1;
    const cublasStatus_t s =
        cublasLtMatmulAlgoGetHeuristic(ds.lt, desc.d, la.l, lb.l, lc.l, lc.l, pref.p, want, cands, &found);
    cublasLtMatmulHeuristicResult_t& res = cands[0];
    if (s != CUBLAS_STATUS_SUCCESS && s != CUBLAS_STATUS_NOT_SUPPORTED)
      cuda::throw_cublas_error(s, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
    if (back.any() && (s != CUBLAS_STATUS_SUCCESS || found == 0)) {
      std::lock_guard<std::mutex> g(g_mu);
      g_no_epilogue_algo.insert(cache_key);
      return false;
    }
    LT_CHECK(s == CUBLAS_STATUS_SUCCESS && found > 0, "gemm: cuBLASLt has no algorithm for this product",
             std::string("problem ") + key + " (dev|dtypes of c, operands|compute|trans|m,n,k,batch|strides|lds|epilogue|alignments)",
             "make the operands contiguous and 16-byte aligned, or report the shapes");
    algo = res.algo;
    if (found > 1) {
      const float alpha = d.alpha, beta = d.beta;
      const int best = fastest_candidate(key, cands, found, [&](const cublasLtMatmulAlgo_t& al, void* dst) {
        return cublasLtMatmul(ds.lt, desc.d, &alpha, b.raw_data(), la.l, a.raw_data(), lb.l, &beta, c.raw_data(),
                              lc.l, dst, lc.l, &al, ws, size_t(ws_bytes), cuda::current_stream());
      }, size_t(((d.batch - 1) * d.stride_c + (d.m - 1) * ldc + d.n) * es));
      algo = cands[best].algo;
    }
    std::lock_guard<std::mutex> g(g_mu);
    g_algos.emplace(cache_key, algo);
  }
  const float alpha = d.alpha, beta = d.beta;
  LT_CUBLAS_CHECK(cublasLtMatmul(ds.lt, desc.d, &alpha, b.raw_data(), la.l, a.raw_data(), lb.l, &beta, c.raw_data(),
                                 lc.l, c.raw_data(), lc.l, &algo, ws, size_t(ws_bytes),
                                 cuda::current_stream()));
  LT_CUDA_LAUNCH_CHECK("cublasLtMatmul");
  return true;
}

}  // namespace

namespace {

// The elements of t's span from `offset` on, as one contiguous row (a sub-matrix's start: the
// GemmDesc's leading dimensions say how the product walks it).
Tensor shifted(const Tensor& t, int64_t offset) {
  return make_view(t, {extent(t) - offset}, {1}, t.offset() + offset);
}

}  // namespace

// cuBLASLt runs a product whose n or k is not a multiple of 16 bytes' worth of elements on its
// align1 kernels, several times slower (GPT-2's head: n = 50257 in the logits, k = 50257 in their
// backward to the hidden states; 28 ms of a 59 ms H100 step). So an unaligned n or k (of a single
// matrix with no GELU epilogue) is split: the aligned bulk in one product, the last few columns
// (n) or the last few terms of the inner sum (k, added with beta = 1) in a second. Same output
// memory, no workspace, a fixed order: deterministic, and nothing the planner would see.
namespace {

// d cut along one of its sizes (m, n or k) at `at`: the first `at` and the rest, each with the
// whole product's leading dimensions spelled out (a part's own sizes would imply others).
std::pair<GemmDesc, GemmDesc> cut(const GemmDesc& d, int64_t GemmDesc::*size, int64_t at) {
  GemmDesc bulk = d, tail = d;
  bulk.lda = tail.lda = d.ld_a();
  bulk.ldb = tail.ldb = d.ld_b();
  bulk.ldc = tail.ldc = d.ld_c();
  bulk.*size = at;
  tail.*size = d.*size - at;
  return {bulk, tail};
}

// Elements of the narrower of c's and the operands' dtypes in 16 bytes: sizes that are multiples
// of it keep every operand on aligned kernels.
int64_t elems_per_16_bytes(const Tensor& c, const Tensor& a) {
  return 16 / int64_t(std::min(dtype_size(c.dtype()), a.defined() ? dtype_size(a.dtype()) : dtype_size(c.dtype())));
}

}  // namespace

void CudaBackend::gemm(const Tensor& c, const Tensor& a, const Tensor& b, const GemmDesc& d, const Tensor& bias) {
  const int64_t per16 = elems_per_16_bytes(c, a);
  constexpr int64_t kMinSplit = 256;  // below it the align1 kernel costs little
  const int64_t lda = d.ld_a(), ldb = d.ld_b(), ldc = d.ld_c();
  if (d.batch == 1 && d.n % per16 && d.n > kMinSplit && d.m > 0 && d.k > 0) {
    const int64_t n0 = d.n - d.n % per16;
    const auto [bulk, tail] = cut(d, &GemmDesc::n, n0);
    const Tensor b_tail = shifted(b, d.trans_b ? n0 * ldb : n0);  // rows n0.. of [n, k], or columns n0.. of [k, n]
    run_gemm(device_index_, c, a, b, bulk, bias.defined() ? bias : Tensor(), false, Tensor());
    run_gemm(device_index_, shifted(c, n0), a, b_tail, tail, bias.defined() ? shifted(bias, n0) : Tensor(), false,
             Tensor());
    return;
  }
  if (d.batch == 1 && d.k % per16 && d.k > kMinSplit && d.m > 0 && d.n > 0) {
    const int64_t k0 = d.k - d.k % per16;
    auto [bulk, tail] = cut(d, &GemmDesc::k, k0);
    tail.beta = 1.0f;  // adds the last terms of the inner sum to the bulk's result
    const Tensor a_tail = shifted(a, d.trans_a ? k0 * lda : k0);  // columns k0.. of [m, k], or rows k0.. of [k, m]
    const Tensor b_tail = shifted(b, d.trans_b ? k0 : k0 * ldb);  // rows k0.. of [k, n], or columns k0.. of [n, k]
    run_gemm(device_index_, c, a, b, bulk, bias, false, Tensor());
    run_gemm(device_index_, c, a_tail, b_tail, tail, Tensor(), false, Tensor());
    return;
  }
  // An unaligned m (rows of c) drops cuBLASLt to its sm80 kernels as well: GPT-2's tied head's
  // weight gradient (m = 50257 vocabulary rows) took 2.47 ms on the H200 against 1.53 ms for the
  // aligned product of the same size. The aligned rows run as one product, the last few as another.
  if (d.batch == 1 && d.m % per16 && d.m > kMinSplit && d.n > 0 && d.k > 0) {
    const int64_t m0 = d.m - d.m % per16;
    const auto [bulk, tail] = cut(d, &GemmDesc::m, m0);
    const Tensor a_tail = shifted(a, d.trans_a ? m0 : m0 * lda);  // columns m0.. of [k, m], or rows m0.. of [m, k]
    run_gemm(device_index_, c, a, b, bulk, bias, false, Tensor());
    run_gemm(device_index_, shifted(c, m0 * ldc), a_tail, b, tail, bias, false, Tensor());
    return;
  }
  run_gemm(device_index_, c, a, b, d, bias, false, Tensor());
}

void CudaBackend::gemm_gelu(const Tensor& c, const Tensor& pre, const Tensor& a, const Tensor& b, const GemmDesc& d,
                            const Tensor& bias) {
  LT_CHECK(pre.defined() && d.batch == 1, "gemm_gelu: needs the pre-activation output and one matrix",
           pre.defined() ? "batch " + std::to_string(d.batch) : "pre is undefined", "call gemm, then the GELU");
  run_gemm(device_index_, c, a, b, d, bias, true, pre);
}

namespace {

// A backward epilogue applies to one packed, unsplit product: no unaligned n or k (CudaBackend::
// gemm splits those), no operand beyond 2^31 elements (split_large).
bool plain_product(const GemmDesc& d, int64_t per16) {
  constexpr int64_t kMaxSpan = (int64_t(1) << 31) - 1;
  return d.batch == 1 && d.n % per16 == 0 && d.k % per16 == 0 && d.m % per16 == 0 && d.m * d.k <= kMaxSpan &&
         d.n * d.k <= kMaxSpan && d.m * d.n <= kMaxSpan && d.beta == 0.0f && d.lda == 0 && d.ldb == 0 && d.ldc == 0;
}

// LEANTRAIN_GEMM_BGRAD_EPILOGUE=0: the bias gradient from reduce_sum's column sums after a plain
// GEMM instead of cuBLASLt's BGRAD epilogue (whose separate reduction kernel read GPT-2's
// gradients at about 45% of the H200's bandwidth), to time the two.
bool bgrad_epilogue_on() {
  static const bool on = knob_on("LEANTRAIN_GEMM_BGRAD_EPILOGUE");
  return on;
}

}  // namespace

void CudaBackend::gemm_bgrad(const Tensor& c, const Tensor& bgrad, const Tensor& a, const Tensor& b,
                             const GemmDesc& d, bool bgrad_of_b) {
  LT_CHECK(bgrad_of_b ? !d.trans_b : d.trans_a, "gemm_bgrad: the summed operand must be stored [k, len]",
           bgrad_of_b ? "b is transposed" : "a is not transposed", "pass the gradient as the [k, len] operand");
  BackwardEpilogue back;
  back.bgrad = bgrad;
  back.bgrad_of_b = bgrad_of_b;
  if (bgrad_epilogue_on() && plain_product(d, elems_per_16_bytes(c, a)) &&
      run_gemm(device_index_, c, a, b, d, Tensor(), false, Tensor(), back))
    return;
  gemm(c, a, b, d, Tensor());
  const Tensor& g = bgrad_of_b ? b : a;
  const int64_t len = bgrad_of_b ? d.n : d.m;
  reduce_sum(make_view(bgrad, {1, len}, {len, 1}, bgrad.offset()), make_view(g, {d.k, len}, {len, 1}, g.offset()));
}

void CudaBackend::gemm_dgelu(const Tensor& c, const Tensor& a, const Tensor& b, const GemmDesc& d, const Tensor& pre) {
  BackwardEpilogue back;
  back.dgelu_pre = pre;
  if (plain_product(d, elems_per_16_bytes(c, a)) && d.n % 8 == 0 &&
      run_gemm(device_index_, c, a, b, d, Tensor(), false, Tensor(), back))
    return;
  gemm(c, a, b, d, Tensor());
  unary_backward(UnaryOp::GeluTanh, c, c, pre, 0.f);
}

namespace cuda {

void gemm_gelu(const Tensor& c, const Tensor& a, const Tensor& b, const GemmDesc& d, const Tensor& bias,
               const Tensor& pre_gelu) {
  LT_CHECK(c.defined() && c.device().is_cuda(), "gemm_gelu: c must be a CUDA tensor",
           c.defined() ? "it is on " + c.device().str() : "it is undefined", "allocate it on the GPU");
  DeviceGuard g(c.device().index);
  run_gemm(c.device().index, c, a, b, d, bias, true, pre_gelu);
}

void* cublaslt_workspace_held(int device, int64_t* bytes) {
  std::lock_guard<std::mutex> g(g_mu);
  const Tensor* w = device >= 0 && device < int(g_workspace.size()) ? g_workspace[size_t(device)] : nullptr;
  *bytes = w ? w->numel() : 0;
  return w ? w->raw_data() : nullptr;
}

void* cublaslt_workspace_borrow(int device, int64_t* bytes) {
  *bytes = 0;
  return current_stream() == stream_handle(device, kComputeStream) ? cublaslt_workspace_held(device, bytes) : nullptr;
}

int64_t cublaslt_workspace_bytes(int device) {
  int64_t bytes = 0;
  cublaslt_workspace_held(device, &bytes);
  return bytes;
}

}  // namespace cuda

void cuda_set_allow_tf32(bool on) { g_allow_tf32.store(on); }
bool cuda_allow_tf32() { return g_allow_tf32.load(); }

}  // namespace lt
