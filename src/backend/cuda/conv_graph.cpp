// Convolutions through cuDNN's backend API (conv_graph.h). Each problem's graph is one
// convolution operation (forward, backward-data or backward-filter) over three tensors with
// leantrain's strides; the plan is the first engine configuration of cuDNN's heuristics (mode A,
// then the fallback list) that finalizes, needs at most the front-end's workspace, and obeys the
// same rules as conv.cu's legacy choice: for 16-bit data a tensor-core engine first, for the
// backward passes no engine with the nondeterministic note, for f32 no tensor-core (TF32) engine
// unless TF32 is allowed. The plans are built once per problem and kept for the process (never
// destroyed: the map outlives every call, and destroying at exit could follow cuDNN's unloading).
// Each call then only fills a variant pack with the three addresses and the workspace.
#include "backend/cuda/conv_graph.h"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/cuda/cudnn_api.h"
#include "backend/cuda/cudnn_desc.h"
#include "leantrain/error.h"

namespace lt::cuda {

namespace {

enum Uid : int64_t { kX = 1, kW, kY };

// A finalized plan and the descriptors it was built from; `none`: cuDNN offers none (asked once).
struct ConvPlan {
  std::vector<CudnnDesc> kept;
  CudnnDesc graph, config, plan;
  int64_t workspace = 0;
  bool none = false;
  std::string why_not;
};

std::mutex g_mu;
std::map<std::string, ConvPlan*>& plans() {
  static auto* m = new std::map<std::string, ConvPlan*>();
  return *m;
}

cudnnDataType_t data_type(DType t) {
  return t == DType::BF16 ? CUDNN_DATA_BFLOAT16 : t == DType::F16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
}

const char* pass_name(ConvGraphPass p) {
  if (p == ConvGraphPass::Forward) return "forward";
  return p == ConvGraphPass::BackwardData ? "backward-data" : "backward-filter";
}

std::string key_of(const ConvGraphProblem& p) {
  std::string k = pass_name(p.pass);
  k += '|';
  auto add = [&k](int64_t v) {
    k += ',';
    k += std::to_string(v);
  };
  k += dtype_name(p.dtype);
  for (const ImageDims& d : {p.x, p.w, p.y})
    for (int64_t v : {d.n, d.c, d.h, d.w}) add(v);
  for (int64_t v : {p.d.stride_h, p.d.stride_w, p.d.pad_h, p.d.pad_w, int64_t(p.d.channels_last), p.workspace_bytes,
                    int64_t(p.deterministic), int64_t(p.allow_tf32), int64_t(p.device)})
    add(v);
  return k;
}

// A tensor of dims [n, c, h, w] in leantrain's memory order: NCHW, or NHWC when channels_last
// (a filter [k, c, r, s] alike: KCRS or KRSC).
cudnnBackendDescriptor_t tensor(ConvPlan& p, cudnnDataType_t t, const ImageDims& d, bool channels_last, int64_t uid) {
  const int64_t dims[4] = {d.n, d.c, d.h, d.w};
  const int64_t nchw[4] = {d.c * d.h * d.w, d.h * d.w, d.w, 1}, nhwc[4] = {d.h * d.w * d.c, 1, d.w * d.c, d.c};
  CudnnDesc desc(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  desc.set_one(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, t)
      .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims)
      .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, channels_last ? nhwc : nchw)
      .set_one(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, uid)
      .set_one(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, int64_t(16));
  desc.finalize("tensor descriptor");
  const cudnnBackendDescriptor_t raw = desc.get();
  p.kept.push_back(std::move(desc));
  return raw;
}

// The operation graph of the problem's one convolution.
void build_graph(ConvPlan& p, const ConvGraphProblem& q, cudnnHandle_t handle) {
  const cudnnDataType_t t = data_type(q.dtype);
  const bool cl = q.d.channels_last;
  const cudnnBackendDescriptor_t x = tensor(p, t, q.x, cl, kX), w = tensor(p, t, q.w, cl, kW),
                                 y = tensor(p, t, q.y, cl, kY);
  const int64_t dilations[2] = {1, 1}, strides[2] = {q.d.stride_h, q.d.stride_w}, pads[2] = {q.d.pad_h, q.d.pad_w};
  CudnnDesc conv(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  conv.set_one(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT)
      .set_one(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, CUDNN_CROSS_CORRELATION)
      .set_one(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, int64_t(2))
      .set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dilations)
      .set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, strides)
      .set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pads)
      .set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pads);
  conv.finalize("convolution descriptor");
  // The pass's operation type and the names of its attributes; x, w, y are dx, w, dy for the
  // backward-data pass and x, dw, dy for the backward-filter one.
  struct OpNames {
    cudnnBackendDescriptorType_t type;
    cudnnBackendAttributeName_t alpha, beta, conv, x, w, y;
  };
  static constexpr OpNames kNames[3] = {
      {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y},
      {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY},
      {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY},
  };
  const OpNames& n = kNames[int(q.pass)];
  CudnnDesc op(n.type);
  op.set_one(n.alpha, CUDNN_TYPE_FLOAT, 1.0f)
      .set_one(n.beta, CUDNN_TYPE_FLOAT, 0.0f)
      .set_desc(n.conv, conv.get())
      .set_desc(n.x, x)
      .set_desc(n.w, w)
      .set_desc(n.y, y);
  op.finalize("convolution operation");
  const cudnnBackendDescriptor_t raw_op = op.get();
  p.graph = CudnnDesc(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  p.graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw_op)
      .set_one(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, handle);
  p.graph.finalize("operation graph");
  p.kept.push_back(std::move(conv));
  p.kept.push_back(std::move(op));
}

// Whether a configuration's engine carries `note`.
bool has_note(cudnnBackendDescriptor_t config, cudnnBackendNumericalNote_t note) {
  CudnnDesc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t e = engine.get();
  int64_t n = 0;
  cudnn_ok(cudnn().cudnnBackendGetAttribute(config, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                                            &e),
           "a configuration's engine");
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  int64_t count = 0;
  cudnn_ok(cudnn().cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                            CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &count, notes),
           "an engine's numerical notes");
  for (int64_t i = 0; i < count; ++i)
    if (notes[i] == note) return true;
  return false;
}

// The first configuration, tier by tier, that the rules allow, finalizes and fits the workspace.
void choose_plan(ConvPlan& p, const ConvGraphProblem& q, cudnnHandle_t handle) {
  const bool half = q.dtype != DType::F32;
  std::string tried;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    std::vector<CudnnDesc> cfgs;
    try {
      cfgs = cudnn_engine_configs(p.graph.get(), mode);
    } catch (const CudnnUnsupported& e) {
      tried += std::string(tried.empty() ? "" : "; ") + e.what();
      continue;
    }
    for (int tier = half ? 0 : 1; tier < 2; ++tier)
      for (size_t i = 0; i < cfgs.size(); ++i) {
        try {
          const cudnnBackendDescriptor_t cfg = cfgs[i].get();
          if (q.deterministic && has_note(cfg, CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC)) continue;
          const bool tensor_core = has_note(cfg, CUDNN_NUMERICAL_NOTE_TENSOR_CORE);
          if (!half && !q.allow_tf32 && (tensor_core || has_note(cfg, CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS)))
            continue;
          if (tier == 0 && !tensor_core) continue;
          CudnnDesc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
          plan.set_one(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, handle)
              .set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg);
          plan.finalize("execution plan");
          int64_t ws = 0, n = 0;
          cudnn_ok(cudnn().cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                    CUDNN_TYPE_INT64, 1, &n, &ws),
                   "a plan's workspace size");
          if (ws > q.workspace_bytes) continue;
          p.plan = std::move(plan);
          p.config = std::move(cfgs[i]);
          p.workspace = ws;
          if (cudnn_log_on())
            std::fprintf(stderr, "cudnn graph %s: heuristics %s config %zu of %zu, tier %d, workspace %lld of %lld\n",
                         pass_name(q.pass), mode == CUDNN_HEUR_MODE_A ? "A" : "fallback", i, cfgs.size(), tier,
                         (long long)ws, (long long)q.workspace_bytes);
          return;
        } catch (const CudnnUnsupported& e) {
          tried += std::string(tried.empty() ? "" : "; ") + e.what();
        }
      }
  }
  throw CudnnUnsupported("no engine configuration fits (" + (tried.empty() ? std::string("none allowed") : tried) +
                         ")");
}

// The kept plan of this problem, built at its first call.
const ConvPlan& plan_for(const ConvGraphProblem& q) {
  const std::string key = key_of(q);
  std::lock_guard<std::mutex> lock(g_mu);
  ConvPlan*& slot = plans()[key];
  if (slot) return *slot;
  auto* p = new ConvPlan();
  const auto t0 = std::chrono::steady_clock::now();
  try {
    const cudnnHandle_t handle = cudnn_handle();
    build_graph(*p, q, handle);
    choose_plan(*p, q, handle);
  } catch (const CudnnUnsupported& e) {
    p->none = true;
    p->why_not = e.what();
  }
  if (cudnn_log_on())
    std::fprintf(stderr, "cudnn graph %s %s: %s in %.1f ms\n", pass_name(q.pass), key.c_str(),
                 p->none ? ("no plan, the legacy API runs it: " + p->why_not).c_str() : "plan built",
                 std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  slot = p;
  return *p;
}

bool aligned(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

}  // namespace

bool conv_graph_run(const ConvGraphProblem& q, void* x, void* w, void* y, void* workspace) {
  if (q.dtype != DType::F32 && q.dtype != DType::BF16 && q.dtype != DType::F16) return false;
  if (!aligned(x) || !aligned(w) || !aligned(y) || (workspace && !aligned(workspace))) return false;
  const ConvPlan& p = plan_for(q);
  if (p.none) return false;
  int64_t uids[3] = {kX, kW, kY};
  void* data[3] = {x, w, y};
  try {
    CudnnDesc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids)
        .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, data)
        .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
    pack.finalize("variant pack");
    cudnn_ok(cudnn().cudnnBackendExecute(cudnn_handle(), p.plan.get(), pack.get()), "cudnnBackendExecute");
  } catch (const CudnnUnsupported& e) {
    fail(std::string("conv2d: cuDNN's ") + pass_name(q.pass) + " plan did not run: " + e.what(),
         "the plan was built for this problem at its first call",
         "set LEANTRAIN_CUDNN_CONV_GRAPH=0 to use the legacy API");
  }
  return true;
}

}  // namespace lt::cuda
