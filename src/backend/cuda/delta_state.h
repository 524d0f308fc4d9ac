// The register-tiled, pipelined state passes of the Gated DeltaNet (delta_state.cu), which
// CudaBackend::gdn_state_fwd / gdn_state_bwd (delta.cu) try first. Each returns false, launching
// nothing, where its shapes don't suit it (key dim over 128 or not a multiple of 4, chunk over 64
// or not a multiple of 4), or where LEANTRAIN_GDN_TILED=0; the caller then runs delta.cu's
// kernels.
// Pointers are the f32 chunk-layout tensors of backend_ops.def's gdn_state_fwd / gdn_state_bwd.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/delta_docs.h"

namespace lt::cuda {

bool gdn_state_fwd_tiled(float* states, float* delta, const float* u, const float* w, const float* kn,
                         const float* gam, int64_t BH, int NC, int C, int Dk, int Dv, const GdnDocs& docs,
                         cudaStream_t stream);
bool gdn_state_bwd_tiled(float* dsend, float* ddelta, const float* dout, const float* p, const float* w,
                         const float* qn, const float* kn, const float* gam, int64_t BH, int NC, int C, int Dk,
                         int Dv, const GdnDocs& docs, cudaStream_t stream);

}  // namespace lt::cuda
