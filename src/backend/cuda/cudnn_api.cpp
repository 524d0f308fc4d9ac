// Loading cuDNN at run time (cudnn_api.h) and one handle per device.
#include "backend/cuda/cudnn_api.h"

#include <dlfcn.h>

#include <array>
#include <mutex>
#include <string>

#include "backend/cuda/cuda_context.h"
#include "leantrain/error.h"

namespace lt::cuda {

namespace {

CudnnApi load() {
  // RTLD_LOCAL: cuDNN's symbols stay out of the global namespace; it loads its own sub-libraries.
  void* lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    fail("cuDNN 9 was not found (libcudnn.so.9)",
         std::string("convolutions and --attention-kernel cudnn on CUDA run through it: ") + (why ? why : "dlopen failed"),
         "install cuDNN 9 (e.g. pip install nvidia-cudnn-cu12 or the cudnn9 package) or add its lib directory to "
         "LD_LIBRARY_PATH");
  }
  CudnnApi api;
#define LT_CUDNN_FN(name)                                                                                      \
  api.name = reinterpret_cast<decltype(&::name)>(dlsym(lib, #name));                                          \
  LT_CHECK(api.name != nullptr, "cuDNN: libcudnn.so.9 has no function " #name, "it is not a cuDNN 9 library", \
           "install cuDNN 9 or point LD_LIBRARY_PATH at it");
#include "backend/cuda/cudnn_functions.def"
  const size_t version = api.cudnnGetVersion();
  LT_CHECK(version >= 90000 && version < 100000, "cuDNN version " + std::to_string(version) + " was loaded",
           "leantrain needs cuDNN 9", "install cuDNN 9 or point LD_LIBRARY_PATH at it");
  return api;
}

std::mutex g_mu;
std::array<cudnnHandle_t, 64> g_handles{};

}  // namespace

const CudnnApi& cudnn() {
  static const CudnnApi api = load();  // a failed load throws and is tried again next time
  return api;
}

void check_cudnn(cudnnStatus_t s, const char* what) {
  if (s == CUDNN_STATUS_SUCCESS) return;
  char detail[512] = {0};
  cudnn().cudnnGetLastErrorString(detail, sizeof detail);  // cuDNN's own account, "" when it has none
  fail(std::string("cuDNN call failed: ") + what,
       std::string(cudnn().cudnnGetErrorString(s)) + (detail[0] ? std::string(" (") + detail + ")" : ""),
       "report it with the shapes involved (LEANTRAIN_CUDA_SYNC=1 locates an asynchronous fault)");
}

cudnnHandle_t cudnn_handle() {
  const CudnnApi& api = cudnn();
  const int dev = current_device();
  cudnnHandle_t h;
  {
    std::lock_guard<std::mutex> g(g_mu);
    cudnnHandle_t& slot = g_handles[size_t(dev)];
    if (!slot) LT_CUDNN_CHECK(api.cudnnCreate(&slot));  // created on the current device, never destroyed
    h = slot;
  }
  LT_CUDNN_CHECK(api.cudnnSetStream(h, current_stream()));
  return h;
}

}  // namespace lt::cuda
