// cuDNN 9's backend (graph) API, the pieces its users share (cudnn_attention.cpp, conv_graph.cpp):
// a descriptor that destroys itself, and status checks that throw CudnnUnsupported with cuDNN's own
// words, which a caller catches to say why cuDNN cannot run a graph (and, where it has one, to
// take its other path).
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cudnn_api.h"
#include "core/knobs.h"

namespace lt::cuda {

// A cuDNN call that did not succeed while building a graph or plan: the call and cuDNN's words.
struct CudnnUnsupported : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline std::string cudnn_last_error() {
  char buf[512] = {0};
  cudnn().cudnnGetLastErrorString(buf, sizeof buf);
  return buf;
}

inline void cudnn_ok(cudnnStatus_t s, const char* what) {
  if (s == CUDNN_STATUS_SUCCESS) return;
  std::string msg = std::string(what) + ": " + cudnn().cudnnGetErrorString(s);
  const std::string detail = cudnn_last_error();
  if (!detail.empty()) msg += " (" + detail + ")";
  throw CudnnUnsupported(msg);
}

// One backend descriptor, destroyed with its owner.
class CudnnDesc {
 public:
  CudnnDesc() = default;
  explicit CudnnDesc(cudnnBackendDescriptorType_t type) {
    cudnn_ok(cudnn().cudnnBackendCreateDescriptor(type, &d_), "cudnnBackendCreateDescriptor");
  }
  ~CudnnDesc() {
    if (d_) cudnn().cudnnBackendDestroyDescriptor(d_);
  }
  CudnnDesc(CudnnDesc&& o) noexcept : d_(o.d_) { o.d_ = nullptr; }
  CudnnDesc& operator=(CudnnDesc&& o) noexcept {
    std::swap(d_, o.d_);
    return *this;
  }
  CudnnDesc(const CudnnDesc&) = delete;
  CudnnDesc& operator=(const CudnnDesc&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }
  CudnnDesc& set(cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t n, const void* v) {
    cudnn_ok(cudnn().cudnnBackendSetAttribute(d_, a, t, n, v), "cudnnBackendSetAttribute");
    return *this;
  }
  CudnnDesc& set_desc(cudnnBackendAttributeName_t a, cudnnBackendDescriptor_t d) {
    return set(a, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d);
  }
  template <class V> CudnnDesc& set_one(cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, V v) {
    return set(a, t, 1, &v);
  }
  void finalize(const char* what) { cudnn_ok(cudnn().cudnnBackendFinalize(d_), what); }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

// The engine configurations cuDNN's heuristics rank for a finalized operation graph, best first
// (empty where `mode` has none).
inline std::vector<CudnnDesc> cudnn_engine_configs(cudnnBackendDescriptor_t graph, cudnnBackendHeurMode_t mode) {
  CudnnDesc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heur.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph).set_one(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, mode);
  heur.finalize("engine heuristics");
  int64_t count = 0;
  cudnn_ok(cudnn().cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                            0, &count, nullptr),
           "engine heuristics' result count");
  std::vector<CudnnDesc> cfgs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) raw.push_back(cfgs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR).get());
  int64_t got = 0;
  if (count > 0)
    cudnn_ok(cudnn().cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, raw.data()),
             "engine heuristics' results");
  cfgs.resize(size_t(got));
  return cfgs;
}

// LEANTRAIN_CUDNN_LOG=1: what the cuDNN paths chose, and the convolutions' host time, on stderr.
inline bool cudnn_log_on() {
  static const bool on = knob_on("LEANTRAIN_CUDNN_LOG");
  return on;
}

}  // namespace lt::cuda
