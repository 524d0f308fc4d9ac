// cuDNN 9 (its legacy convolution API, and its backend graph API for attention's fused SDPA),
// loaded with dlopen("libcudnn.so.9") at the first convolution or cuDNN attention instead of
// linked: the binary starts, and runs every other op, on a machine without cuDNN; a convolution
// there fails with one lt::Error line (attention under --attention-kernel auto runs leantrain's
// kernels). The types come from cudnn.h; the calls go through the function pointers below.
#pragma once
#include <cudnn.h>

namespace lt::cuda {

struct CudnnApi {
#define LT_CUDNN_FN(name) decltype(&::name) name = nullptr;
#include "backend/cuda/cudnn_functions.def"
};

// The loaded library's functions; lt::Error when libcudnn.so.9 cannot be loaded or lacks one.
const CudnnApi& cudnn();
// The current device's handle, set to the current stream.
cudnnHandle_t cudnn_handle();
// Throws lt::Error naming the call for a status other than success.
void check_cudnn(cudnnStatus_t s, const char* what);

}  // namespace lt::cuda

#define LT_CUDNN_CHECK(expr) ::lt::cuda::check_cudnn((expr), #expr)
