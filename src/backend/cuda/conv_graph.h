// Convolutions through cuDNN 9's backend (graph) API with execution plans built once per problem
// and kept (conv_graph.cpp). The legacy API (cudnnConvolutionForward and kin) spends 110-250 us of
// host time a call on an H100 (LEANTRAIN_CUDNN_LOG=1, bench/results/issues44-46-h100-f09c7ad.md):
// a ResNet step at a small batch is then bound by the host issuing its convolutions. conv.cu
// tries this path first (unless LEANTRAIN_CUDNN_CONV_GRAPH=0) and falls back to the legacy one where
// cuDNN offers no plan that fits.
#pragma once
#include <cstdint>

#include "backend/backend.h"

namespace lt::cuda {

enum class ConvGraphPass { Forward, BackwardData, BackwardFilter };

// One convolution problem. Dims by meaning (ImageDims), whatever the layout: x [N, C, H, W],
// w [K, C, R, S], y [N, K, P, Q]; the memory order is NHWC (w: KRSC) when d.channels_last.
struct ConvGraphProblem {
  ConvGraphPass pass = ConvGraphPass::Forward;
  DType dtype = DType::BF16;
  ImageDims x{}, w{}, y{};
  Conv2dDesc d;
  int64_t workspace_bytes = 0;  // the front-end's workspace: a plan must need at most this
  bool deterministic = false;   // the backward passes: only engines without the nondeterministic note
  bool allow_tf32 = false;      // f32: tensor-core (TF32) engines only when allowed
  int device = 0;
};

// Runs the problem on the current stream through its cached plan (built at its first call): x,
// w, y are the three operands' device addresses (for the backward passes dx or dw are the
// outputs, in place of x or w; dy in place of y). Returns false, and does nothing, when cuDNN
// has no plan for it (f64, a plan needing more workspace, an engine it will not finalize...) or
// an address is not 16-byte aligned; the caller then runs the legacy API.
bool conv_graph_run(const ConvGraphProblem& p, void* x, void* w, void* y, void* workspace);

}  // namespace lt::cuda
