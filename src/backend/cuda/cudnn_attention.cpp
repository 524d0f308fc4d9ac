// cuDNN's fused flash attention (--attention-kernel cudnn|auto) through cuDNN 9's backend API:
// the op front-end routes a call here (src/ops/attention.cpp, route_attention), and this file
// writes the operation graph cuDNN's SDPA engines recognise, asks cuDNN's heuristics for an
// engine, and caches the finalized execution plan per shape and layout (building one compiles
// kernels at run time: tens of milliseconds to seconds; a run meets a handful of shapes).
//
// Forward graph (S, P are virtual: never in memory; cuDNN fuses the whole chain into one kernel):
//   S = Q Kᵀ · scale  [causal: S = row >= col ? S : -inf, rows and columns from GEN_INDEX]
//   M = rowmax(S), E = exp(S - M), Σ = rowsum(E), Stats = M + log Σ (our lse), P = E / Σ (16-bit)
//   O = P V
// Backward graph, with delta = rowsum(dO · O) in the f32 row sums of the workspace:
//   P = exp(Q Kᵀ · scale - Stats) [causal mask], dV = Pᵀ dO, dS = P (dO Vᵀ - delta) · scale,
//   dK = dSᵀ Q, dQ_accum (f32, in the workspace) = dS K, dQ = dQ_accum.
// With grouped-query attention (Hkv < H) Kᵀ and V carry Hkv heads (the matmuls broadcast them)
// and dK, dV are reductions over each kv head's group of the full-head products, all inside the
// graph. The transposes (Kᵀ, Vᵀ, Pᵀ, dSᵀ) are the same memory with two strides swapped.
//
// Stats is the natural-log log-sum-exp of the scaled scores, the very lse of leantrain's kernels
// (backend_ops.def), so the two paths' saved tensors are interchangeable: either backward takes
// either forward's lse. Memory: the forward allocates nothing; the backward's f32 dQ accumulator
// and row sums live in the workspace tensor the front-end allocates (a plan sees it); cuDNN's own
// scratch, if its engine asks for any, is lent from the cuBLASLt workspace (held on the compute
// stream; nothing allocated): the first engine of cuDNN's list that fits it is taken, and a call
// whose engine needs more than can be lent fails (cudnn) or runs leantrain's kernels (auto).
// cuDNN's backward accumulates dQ with atomics: its bits may differ run to run, unlike
// leantrain's kernels.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/attention_workspace.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_context.h"
#include "backend/cuda/cudnn_api.h"
#include "backend/cuda/cudnn_desc.h"
#include "leantrain/error.h"

namespace lt {

namespace {

using cuda::cudnn;
using Dims = std::array<int64_t, 4>;

using Unsupported = cuda::CudnnUnsupported;
using Desc = cuda::CudnnDesc;
inline void ok(cudnnStatus_t s, const char* what) { cuda::cudnn_ok(s, what); }

// The non-virtual tensors' ids in the variant pack.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV, kScale, kNegInf, kOne, kRowSum, kDQAcc };

// Builds one operation graph; keeps every descriptor alive as long as the plan made from it.
class Graph {
 public:
  using T = cudnnBackendDescriptor_t;

  // A tensor of the graph. Virtual ones (no uid given) never reach memory; by_value ones are
  // scalars whose host value the variant pack points at.
  T tensor(cudnnDataType_t dt, const Dims& dims, const Dims& strides, int64_t uid = 0, bool by_value = false) {
    Desc t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const bool is_virtual = uid == 0;
    const int64_t id = is_virtual ? next_virtual_++ : uid;
    const int64_t align = 16;
    t.set_one(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, dt)
        .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data())
        .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data())
        .set_one(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, id)
        .set_one(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, align)
        .set_one(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, is_virtual);
    if (by_value) t.set_one(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, true);
    t.finalize("tensor descriptor");
    return keep(std::move(t));
  }
  // A virtual tensor [d0, d1, d2, d3] laid out packed.
  T virt(cudnnDataType_t dt, const Dims& d) { return tensor(dt, d, {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1}); }
  T scalar(int64_t uid) { return tensor(CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, uid, true); }

  // y = mode(x [, b [, t]]) elementwise, computed in `prec`; axis for GEN_INDEX.
  void pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t prec, T x, T b, T t, T y, int64_t axis = -1) {
    Desc pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    pw.set_one(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, mode)
        .set_one(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, prec);
    if (axis >= 0) pw.set_one(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, axis);
    pw.finalize("pointwise descriptor");
    Desc op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw.get()).set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
    if (b) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
    if (t) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t);
    op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y)
        .set_one(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1.0f)
        .set_one(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1.0f);
    op.finalize("pointwise operation");
    keep(std::move(pw));
    add_op(std::move(op));
  }
  T unary(cudnnPointwiseMode_t mode, T x, T y) {
    pointwise(mode, CUDNN_DATA_FLOAT, x, nullptr, nullptr, y);
    return y;
  }
  T binary(cudnnPointwiseMode_t mode, T x, T b, T y) {
    pointwise(mode, CUDNN_DATA_FLOAT, x, b, nullptr, y);
    return y;
  }
  // c = a b over the last two dims, batched (and broadcast) over the first two; f32 accumulation.
  void matmul(T a, T b, T c) {
    Desc mm(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    mm.set_one(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT);
    mm.finalize("matmul descriptor");
    Desc op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_ADESC, a)
        .set_desc(CUDNN_ATTR_OPERATION_MATMUL_BDESC, b)
        .set_desc(CUDNN_ATTR_OPERATION_MATMUL_CDESC, c)
        .set_desc(CUDNN_ATTR_OPERATION_MATMUL_DESC, mm.get());
    op.finalize("matmul operation");
    keep(std::move(mm));
    add_op(std::move(op));
  }
  // y = reduce(x) over the dims where y is smaller.
  void reduction(cudnnReduceTensorOp_t how, T x, T y) {
    Desc rd(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    rd.set_one(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, how)
        .set_one(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT);
    rd.finalize("reduction descriptor");
    Desc op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x)
        .set_desc(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y)
        .set_desc(CUDNN_ATTR_OPERATION_REDUCTION_DESC, rd.get());
    op.finalize("reduction operation");
    keep(std::move(rd));
    add_op(std::move(op));
  }
  // y = x seen with y's dims and strides (a transpose here: no data moves).
  void reshape(T x, T y) {
    Desc op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x).set_desc(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y);
    op.finalize("reshape operation");
    add_op(std::move(op));
  }
  // The causal mask on scores x [B, H, Tq, Tk]: x where row >= column, else -inf.
  T causal_mask(T x, const Dims& d, T neg_inf) {
    T row = virt(CUDNN_DATA_INT32, d), col = virt(CUDNN_DATA_INT32, d), keep = virt(CUDNN_DATA_BOOLEAN, d);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, x, nullptr, nullptr, row, 2);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, x, nullptr, nullptr, col, 3);
    pointwise(CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, nullptr, keep);
    T y = virt(CUDNN_DATA_FLOAT, d);
    pointwise(CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, x, neg_inf, keep, y);
    return y;
  }

  // The operation graph of every op added, in order.
  Desc finalize(cudnnHandle_t handle) {
    std::vector<cudnnBackendDescriptor_t> raw;
    for (const Desc& d : ops_) raw.push_back(d.get());
    Desc g(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    g.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(raw.size()), raw.data())
        .set_one(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, handle);
    g.finalize("operation graph");
    return g;
  }

 private:
  T keep(Desc d) {
    T raw = d.get();
    kept_.push_back(std::move(d));
    return raw;
  }
  void add_op(Desc d) { ops_.push_back(std::move(d)); }

  int64_t next_virtual_ = 100;
  std::vector<Desc> kept_, ops_;
};

// The shape and layout of one call: the plan cache's key.
struct Shape4 {
  int64_t B, H, Hkv, Tq, Tk, D;
};
Dims strides_of(const Tensor& t) { return {t.strides()[0], t.strides()[1], t.strides()[2], t.strides()[3]}; }
// [B, h, a, b] strides with the last two swapped: the transposed view of the same memory.
Dims swap23(Dims s) {
  std::swap(s[2], s[3]);
  return s;
}
cudnnDataType_t io_type(DType t) { return t == DType::BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF; }

// -inf for masked scores; cuDNN before 9.1 wanted the lowest finite float instead.
float masked_score(size_t version) { return version < 91000 ? std::numeric_limits<float>::lowest() : -INFINITY; }

// Forward: q, k, v, out views; stats = lse [B, H, Tq] f32.
void build_forward(Graph& g, const Shape4& s, cudnnDataType_t io, bool causal, const Dims& sq, const Dims& sk,
                   const Dims& sv, const Dims& so) {
  const Dims scores{s.B, s.H, s.Tq, s.Tk}, rows{s.B, s.H, s.Tq, 1};
  const Dims row_strides{s.H * s.Tq, s.Tq, 1, 1};
  auto Q = g.tensor(io, {s.B, s.H, s.Tq, s.D}, sq, kQ);
  auto KT = g.tensor(io, {s.B, s.Hkv, s.D, s.Tk}, swap23(sk), kK);
  auto V = g.tensor(io, {s.B, s.Hkv, s.Tk, s.D}, sv, kV);
  auto O = g.tensor(io, {s.B, s.H, s.Tq, s.D}, so, kO);
  auto stats = g.tensor(CUDNN_DATA_FLOAT, rows, row_strides, kStats);
  auto scale = g.scalar(kScale);
  auto S = g.virt(CUDNN_DATA_FLOAT, scores);
  g.matmul(Q, KT, S);
  S = g.binary(CUDNN_POINTWISE_MUL, S, scale, g.virt(CUDNN_DATA_FLOAT, scores));
  if (causal) S = g.causal_mask(S, scores, g.scalar(kNegInf));
  auto M = g.tensor(CUDNN_DATA_FLOAT, rows, row_strides);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, S, M);
  auto E = g.unary(CUDNN_POINTWISE_EXP, g.binary(CUDNN_POINTWISE_SUB, S, M, g.virt(CUDNN_DATA_FLOAT, scores)),
                   g.virt(CUDNN_DATA_FLOAT, scores));
  auto sum = g.tensor(CUDNN_DATA_FLOAT, rows, row_strides);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, E, sum);
  g.binary(CUDNN_POINTWISE_ADD, M, g.unary(CUDNN_POINTWISE_LOG, sum, g.tensor(CUDNN_DATA_FLOAT, rows, row_strides)),
           stats);
  auto P = g.binary(CUDNN_POINTWISE_DIV, E, sum, g.virt(io, scores));  // the second matmul reads P in 16 bits
  g.matmul(P, V, O);
}

// Backward: the forward's operands, dO (dout) and the outputs dq, dk, dv; the workspace holds
// dQ_accum [B, H, Tq, D] f32 then delta [B, H, Tq] f32.
void build_backward(Graph& g, const Shape4& s, cudnnDataType_t io, bool causal, const Dims& sq, const Dims& sk,
                    const Dims& sv, const Dims& so, const Dims& sdo, const Dims& sdq, const Dims& sdk,
                    const Dims& sdv) {
  const Dims scores{s.B, s.H, s.Tq, s.Tk}, rows{s.B, s.H, s.Tq, 1}, q_dims{s.B, s.H, s.Tq, s.D};
  const Dims row_strides{s.H * s.Tq, s.Tq, 1, 1};
  // The scores transposed, [B, H, Tk, Tq] over the same elements.
  const Dims t_dims{s.B, s.H, s.Tk, s.Tq}, t_strides{s.H * s.Tq * s.Tk, s.Tq * s.Tk, 1, s.Tk};
  auto Q = g.tensor(io, q_dims, sq, kQ);
  auto KT = g.tensor(io, {s.B, s.Hkv, s.D, s.Tk}, swap23(sk), kK);
  auto VT = g.tensor(io, {s.B, s.Hkv, s.D, s.Tk}, swap23(sv), kV);
  auto O = g.tensor(io, q_dims, so, kO);
  auto dO = g.tensor(io, q_dims, sdo, kDO);
  auto stats = g.tensor(CUDNN_DATA_FLOAT, rows, row_strides, kStats);
  auto dQ = g.tensor(io, q_dims, sdq, kDQ);
  auto dK = g.tensor(io, {s.B, s.Hkv, s.Tk, s.D}, sdk, kDK);
  auto dV = g.tensor(io, {s.B, s.Hkv, s.Tk, s.D}, sdv, kDV);
  auto scale = g.scalar(kScale), one = g.scalar(kOne);
  auto delta = g.tensor(CUDNN_DATA_FLOAT, rows, row_strides, kRowSum);
  auto dq_acc = g.tensor(CUDNN_DATA_FLOAT, q_dims, {s.H * s.Tq * s.D, s.Tq * s.D, s.D, 1}, kDQAcc);

  // delta = rowsum(dO * O)
  auto dOO = g.binary(CUDNN_POINTWISE_MUL, dO, O, g.virt(CUDNN_DATA_FLOAT, q_dims));
  auto dsum = g.tensor(CUDNN_DATA_FLOAT, rows, row_strides);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, dOO, dsum);
  g.binary(CUDNN_POINTWISE_MUL, dsum, one, delta);
  // P = exp(Q Kᵀ scale - lse), masked
  auto S = g.virt(CUDNN_DATA_FLOAT, scores);
  g.matmul(Q, KT, S);
  S = g.binary(CUDNN_POINTWISE_MUL, S, scale, g.virt(CUDNN_DATA_FLOAT, scores));
  S = g.binary(CUDNN_POINTWISE_SUB, S, stats, g.virt(CUDNN_DATA_FLOAT, scores));
  if (causal) S = g.causal_mask(S, scores, g.scalar(kNegInf));
  auto P = g.unary(CUDNN_POINTWISE_EXP, S, g.virt(CUDNN_DATA_FLOAT, scores));
  // With G query heads per kv head, dK and dV are the sums over each group of full-head products.
  auto grouped_into = [&](auto product, Graph::T out) {
    if (s.H == s.Hkv) return product(out);
    auto full = g.virt(io, {s.B, s.H, s.Tk, s.D});
    product(full);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, full, out);
  };
  // dV = Pᵀ dO
  auto PT = g.tensor(io, t_dims, t_strides);
  g.reshape(P, PT);
  grouped_into([&](Graph::T out) { g.matmul(PT, dO, out); }, dV);
  // dS = P (dO Vᵀ - delta) scale
  auto dP = g.virt(CUDNN_DATA_FLOAT, scores);
  g.matmul(dO, VT, dP);
  auto dS = g.binary(CUDNN_POINTWISE_SUB, dP, delta, g.virt(CUDNN_DATA_FLOAT, scores));
  dS = g.binary(CUDNN_POINTWISE_MUL, dS, P, g.virt(CUDNN_DATA_FLOAT, scores));
  dS = g.binary(CUDNN_POINTWISE_MUL, dS, scale, g.virt(CUDNN_DATA_FLOAT, scores));
  // dK = dSᵀ Q
  auto dST = g.tensor(io, t_dims, t_strides);
  g.reshape(dS, dST);
  grouped_into([&](Graph::T out) { g.matmul(dST, Q, out); }, dK);
  // dQ = dS K, accumulated in f32, then stored in 16 bits (K: Kᵀ seen untransposed, an f32-typed
  // virtual view as cuDNN's frontend writes it)
  auto K = g.tensor(CUDNN_DATA_FLOAT, {s.B, s.Hkv, s.Tk, s.D}, sk);
  g.reshape(KT, K);
  g.matmul(dS, K, dq_acc);
  g.unary(CUDNN_POINTWISE_IDENTITY, dq_acc, dQ);
}

// A finalized plan and everything it was built from; or why there is none.
struct Plan {
  Graph graph;
  Desc op_graph, engine_cfg, plan;
  bool backward = false, causal = false;  // which scalars the graph takes
  int64_t workspace = 0;
  std::string why_not;  // non-empty: cuDNN could not run this shape (kept, so it is asked once)
};

std::mutex g_mu;
std::map<std::string, std::unique_ptr<Plan>> g_plans;

using cuda::cudnn_log_on;

// The first engine of cuDNN's heuristics (mode A, then the fallback list) that finalizes for this
// graph and needs at most `ws_limit` bytes of scratch; failing that, the first that finalizes
// (execute() then says it needs more scratch than can be lent, if it still does).
void choose_engine(Plan& p, cudnnHandle_t handle, int64_t ws_limit) {
  std::string tried;
  auto note = [&](const std::string& w) { tried += (tried.empty() ? "" : "; ") + w; };
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    const char* mode_name = mode == CUDNN_HEUR_MODE_A ? "heuristics A" : "fallback heuristics";
    try {
      std::vector<Desc> cfgs = cuda::cudnn_engine_configs(p.op_graph.get(), mode);
      const int64_t got = int64_t(cfgs.size());
      if (got == 0) note(std::string(mode_name) + ": no engine");
      for (int64_t i = 0; i < got; ++i) {
        try {
          Desc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
          plan.set_one(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, handle)
              .set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfgs[size_t(i)].get());
          plan.finalize("execution plan");
          int64_t ws = 0, n = 0;
          ok(cudnn().cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                                              1, &n, &ws),
             "plan workspace size");
          const bool fits = ws <= ws_limit;
          if (!fits) note(std::string(mode_name) + " config " + std::to_string(i) + " wants " + std::to_string(ws) +
                          " bytes of scratch, " + std::to_string(ws_limit) + " can be lent");
          if (fits || !p.plan.get()) {  // the first that fits, else the first that finalized
            p.plan = std::move(plan);
            p.engine_cfg = std::move(cfgs[size_t(i)]);
            p.workspace = ws;
            if (cudnn_log_on())
              std::fprintf(stderr, "leantrain: cudnn attention: %s, engine config %lld of %lld, workspace %lld bytes\n",
                           mode_name, (long long)i, (long long)got, (long long)ws);
          }
          if (fits) return;
        } catch (const Unsupported& e) {
          note(std::string(mode_name) + " config " + std::to_string(i) + ": " + e.what());
        }
      }
    } catch (const Unsupported& e) {
      note(std::string(mode_name) + ": " + e.what());
    }
  }
  if (!p.plan.get()) throw Unsupported("no cuDNN engine runs this graph (" + tried + ")");
}

// Scratch lent to cuDNN: the cuBLASLt workspace when this stream owns it.
void* lent_workspace(int dev, int64_t* bytes) { return cuda::cublaslt_workspace_borrow(dev, bytes); }

std::string shape_text(bool bwd, DType dt, const Shape4& s, bool causal) {
  return std::string(bwd ? "backward" : "forward") + " " + dtype_name(dt) + " B " + std::to_string(s.B) + " H " +
         std::to_string(s.H) + " Hkv " + std::to_string(s.Hkv) + " Tq " + std::to_string(s.Tq) + " Tk " +
         std::to_string(s.Tk) + " D " + std::to_string(s.D) + (causal ? " causal" : "");
}

std::string dims_text(const Dims& d) {
  return std::to_string(d[0]) + "," + std::to_string(d[1]) + "," + std::to_string(d[2]) + "," + std::to_string(d[3]);
}

// The cached plan for this call, built on first use. Throws Unsupported when cuDNN cannot run it
// (also on later calls of the same shape, from the cache). own_scratch: bytes of the caller's
// workspace the engine may take (the same for every call of a shape), besides what can be lent.
Plan& plan_for(int dev, bool bwd, DType dt, const Shape4& s, bool causal, const std::vector<Dims>& layouts,
               int64_t own_scratch = 0) {
  std::string key = std::to_string(dev) + "|" + shape_text(bwd, dt, s, causal);
  for (const Dims& d : layouts) key.append("|").append(dims_text(d));  // GCC 12 warns (-Wrestrict) on "|" + s
  std::lock_guard<std::mutex> lock(g_mu);
  std::unique_ptr<Plan>& slot = g_plans[key];
  if (!slot) {
    slot = std::make_unique<Plan>();
    Plan& p = *slot;
    p.backward = bwd;
    p.causal = causal;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      const cudnnHandle_t handle = cuda::cudnn_handle();
      const cudnnDataType_t io = io_type(dt);
      if (bwd)
        build_backward(p.graph, s, io, causal, layouts[0], layouts[1], layouts[2], layouts[3], layouts[4], layouts[5],
                       layouts[6], layouts[7]);
      else
        build_forward(p.graph, s, io, causal, layouts[0], layouts[1], layouts[2], layouts[3]);
      p.op_graph = p.graph.finalize(handle);
      int64_t lendable = 0;
      lent_workspace(dev, &lendable);
      choose_engine(p, handle, std::max(lendable, own_scratch));
    } catch (const Unsupported& e) {
      p.why_not = e.what();
    } catch (...) {  // not cuDNN's answer about the graph (the handle could not be made...): ask again next time
      g_plans.erase(key);
      throw;
    }
    if (cudnn_log_on())
      std::fprintf(stderr, "leantrain: cudnn attention %s (cuDNN %zu): %s in %.0f ms\n",
                   shape_text(bwd, dt, s, causal).c_str(), cudnn().cudnnGetVersion(),
                   p.why_not.empty() ? "plan built" : ("no plan: " + p.why_not).c_str(),
                   std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  if (!slot->why_not.empty()) throw Unsupported(slot->why_not);
  return *slot;
}

// Runs the plan with the tensors' addresses; scalars by value. The engine's scratch: the caller's
// own (own_bytes at own, part of a planned workspace) where it is enough, else the cuBLASLt
// workspace lent for the call.
void execute(Plan& p, int dev, const std::vector<std::pair<int64_t, void*>>& ptrs, float scale, size_t version,
             void* own = nullptr, int64_t own_bytes = 0) {
  int64_t lendable = 0;
  void* ws = nullptr;
  if (p.workspace > 0 && own && p.workspace <= own_bytes)
    ws = own;
  else if (p.workspace > 0) {
    ws = lent_workspace(dev, &lendable);
    if (!ws || p.workspace > lendable)
      throw Unsupported("its engine needs " + std::to_string(p.workspace) + " bytes of scratch and " +
                        std::to_string(ws ? std::max(lendable, own_bytes) : own_bytes) +
                        " can be lent now (the cuBLASLt workspace, on the compute stream; --gemm-workspace; or the "
                        "backward's own, attention_cudnn_workspace_bytes)");
  }
  float scale_v = scale, neg_inf = masked_score(version), one = 1.0f;
  std::vector<int64_t> uids;
  std::vector<void*> data;
  for (const auto& [uid, ptr] : ptrs) uids.push_back(uid), data.push_back(ptr);
  // The scalars the graph has (the variant pack lists exactly its non-virtual tensors).
  uids.push_back(kScale), data.push_back(&scale_v);
  if (p.causal) uids.push_back(kNegInf), data.push_back(&neg_inf);
  if (p.backward) uids.push_back(kOne), data.push_back(&one);
  Desc vp(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  vp.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, int64_t(uids.size()), uids.data())
      .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, int64_t(data.size()), data.data())
      .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
  vp.finalize("variant pack");
  LT_CUDNN_CHECK(cudnn().cudnnBackendExecute(cuda::cudnn_handle(), p.plan.get(), vp.get()));
}

// Once per process, what auto fell back from.
void note_fallback(const std::string& why) {
  static std::once_flag once;
  std::call_once(once, [&] {
    std::fprintf(stderr,
                 "leantrain: --attention-kernel auto: cuDNN's fused attention did not run (%s); leantrain's kernels "
                 "run those calls instead (LEANTRAIN_CUDNN_LOG=1 lists every shape)\n",
                 why.c_str());
  });
}

// cuDNN loaded (libcudnn.so.9, version 9): true; else false under auto (noted once), the load's
// lt::Error under cudnn.
bool cudnn_loaded(bool strict) {
  try {
    cudnn();
    return true;
  } catch (const Error& e) {
    if (strict) throw;
    note_fallback(e.what());
    return false;
  }
}

[[noreturn]] void fail_strict(const char* op, const std::string& shape, const std::string& why) {
  fail(std::string(op) + ": --attention-kernel cudnn could not run " + shape, "cuDNN: " + why,
       "pass --attention-kernel auto to run leantrain's kernels where cuDNN cannot, or leantrain");
}

Shape4 shape4(const Tensor& q, const Tensor& k) { return {q.size(0), q.size(1), k.size(1), q.size(2), k.size(2), q.size(3)}; }

void check_operands(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& lse) {
  LT_CHECK(q.dim() == 4 && k.dim() == 4 && v.shape() == k.shape() && k.size(0) == q.size(0) && k.size(3) == q.size(3) &&
               k.size(1) > 0 && q.size(1) % k.size(1) == 0 && (q.dtype() == DType::BF16 || q.dtype() == DType::F16) &&
               k.dtype() == q.dtype() && v.dtype() == q.dtype(),
           std::string(op) + ": q [B, H, Tq, D], k and v [B, Hkv, Tk, D] of bf16 or f16 expected",
           "the front-end routes only such calls to cuDNN", "");
  LT_CHECK(lse.dtype() == DType::F32 && lse.is_contiguous() && lse.numel() == q.size(0) * q.size(1) * q.size(2),
           std::string(op) + ": lse must be a contiguous f32 [B, H, Tq]", "cuDNN writes its Stats there", "");
}

}  // namespace

void CudaBackend::attention_fwd_cudnn(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                                     const Tensor& v, bool causal, float scale, bool strict) {
  const char* op = "attention_fwd_cudnn";
  check_operands(op, q, k, v, lse);
  const Shape4 s = shape4(q, k);
  if (s.B * s.H * s.Tq == 0) return;
  if (cudnn_loaded(strict)) {
    try {
      const size_t version = cudnn().cudnnGetVersion();
      Plan& p = plan_for(device_index_, false, q.dtype(), s, causal,
                         {strides_of(q), strides_of(k), strides_of(v), strides_of(out)});
      execute(p, device_index_,
              {{kQ, q.raw_data()}, {kK, k.raw_data()}, {kV, v.raw_data()}, {kO, out.raw_data()}, {kStats, lse.raw_data()}},
              scale, version);
      return;
    } catch (const Unsupported& e) {
      if (strict) fail_strict(op, shape_text(false, q.dtype(), s, causal), e.what());
      note_fallback(e.what());
    }
  }
  attention_fwd(out, lse, q, k, v, Tensor(), causal, 0, Tensor(), scale);
}

void CudaBackend::attention_bwd_cudnn(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                                     const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                     const Tensor& lse, const Tensor& workspace, bool causal, float scale,
                                     bool strict) {
  const char* op = "attention_bwd_cudnn";
  check_operands(op, q, k, v, lse);
  const Shape4 s = shape4(q, k);
  for (const Tensor* t : {&dq, &dout, &out})
    LT_CHECK(t->shape() == q.shape() && t->dtype() == q.dtype(), std::string(op) + ": dq, dout and out must be shaped as q",
             "the backward's operands", "");
  LT_CHECK(dk.shape() == k.shape() && dv.shape() == k.shape() && dk.dtype() == q.dtype() && dv.dtype() == q.dtype(),
           std::string(op) + ": dk and dv must be shaped as k", "", "");
  const int64_t ws_bytes = attention_ws::bytes(s.B, s.H, s.Hkv, s.Tq, s.Tk, s.D);
  LT_CHECK(workspace.defined() && workspace.is_contiguous() && workspace.nbytes() >= ws_bytes,
           std::string(op) + ": the workspace holds " + std::to_string(workspace.defined() ? workspace.nbytes() : 0) +
               " bytes, " + std::to_string(ws_bytes) + " are needed",
           "cuDNN's f32 dQ accumulator and row sums live there (attention_cudnn_workspace_bytes)", "");
  if (s.B * s.H * s.Tq == 0) return;
  if (cudnn_loaded(strict)) {
    try {
      const size_t version = cudnn().cudnnGetVersion();
      // Versions up to 9.15 need a padding mask for key lengths off multiples of 128 (cuDNN's
      // frontend adds one); not built here: those shapes run leantrain's backward under auto.
      if (version < 91600 && s.Tk % 128 != 0)
        throw Unsupported("cuDNN " + std::to_string(version) + "'s backward needs Tk a multiple of 128 here (" +
                          std::to_string(s.Tk) + "; 9.16 and later take any)");
      // Before 9.5.1 cuDNN assumed dO laid out as O.
      if (version < 90501 && strides_of(dout) != strides_of(out))
        throw Unsupported("cuDNN " + std::to_string(version) + " needs dout laid out as out");
      // The engine's own scratch: what the workspace holds past the accumulator and row sums
      // (grouped-query heads; none otherwise).
      const int64_t scratch_at = attention_ws::scratch_offset(s.B, s.H, s.Tq, s.D);
      const int64_t own_bytes = std::max<int64_t>(0, workspace.nbytes() - scratch_at);
      Plan& p = plan_for(device_index_, true, q.dtype(), s, causal,
                         {strides_of(q), strides_of(k), strides_of(v), strides_of(out), strides_of(dout),
                          strides_of(dq), strides_of(dk), strides_of(dv)},
                         own_bytes);
      auto* acc = static_cast<char*>(workspace.raw_data());
      const int64_t acc_bytes = 4 * s.B * s.H * s.Tq * s.D;
      // Before 9.6 the accumulator had to start at zero (cuDNN's frontend cleared it).
      if (version < 90600) LT_CUDA_CHECK(cudaMemsetAsync(acc, 0, size_t(acc_bytes), cuda::current_stream()));
      execute(p, device_index_,
              {{kQ, q.raw_data()}, {kK, k.raw_data()}, {kV, v.raw_data()}, {kO, out.raw_data()},
               {kDO, dout.raw_data()}, {kStats, lse.raw_data()}, {kDQ, dq.raw_data()}, {kDK, dk.raw_data()},
               {kDV, dv.raw_data()}, {kDQAcc, acc}, {kRowSum, acc + acc_bytes}},
              scale, version, own_bytes > 0 ? acc + scratch_at : nullptr, own_bytes);
      return;
    } catch (const Unsupported& e) {
      if (strict) fail_strict(op, shape_text(true, q.dtype(), s, causal), e.what());
      note_fallback(e.what());
    }
  }
  attention_bwd(dq, dk, dv, dout, q, k, v, out, lse, Tensor(), causal, 0, Tensor(), scale);
}

}  // namespace lt
