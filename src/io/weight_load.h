// Streaming a model's weights from its safetensors files (io/weight_files.h) into the parameter
// store. Everything is resolved and checked first (each file tensor's target, missing and
// unexpected names, shapes, dtypes), so a bad checkpoint leaves the model untouched; then each
// tensor's bytes go from the file's read-only mapping to its parameter, converting the dtype on
// the way (F32, F16, BF16 in the files; F32, F16, BF16 parameters):
//   cpu    straight from the mapping into the parameter (memcpy, or the CPU backend's cast)
//   cuda   through one pinned staging buffer of at most chunk_bytes, split in two halves so the
//          host fills one (cast on the host) while the other's copy to the device runs
//   meta   nothing moves; when meta simulates CUDA (a plan) the same staging buffer is taken from
//          meta's pinned-host account, so the plan's pinned peak is the run's
// The staging buffer is the only host memory a load allocates, and it is freed when the load
// returns. No device memory is allocated: the parameters already exist.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "io/weight_files.h"
#include "leantrain/tensor.h"

namespace lt::io {

inline constexpr int64_t kLoadChunkBytes = int64_t(64) << 20;

// One tensor of the files and where its values go.
struct WeightTarget {
  std::string name;      // its name in the files
  std::string param;     // the parameter or buffer it fills (messages; coverage)
  Tensor dst;            // that parameter, or the contiguous rows of it the tensor holds
  bool required = true;  // false (buffers): kept as built when the files lack it
};

struct WeightLoadSpec {
  std::vector<WeightTarget> targets;  // the model's checkpoint layout
  // A file tensor that is no target: the parameter it holds whole ("" = ignore the tensor), for
  // other naming conventions of the same weights. Unset: such a tensor is unexpected.
  std::function<std::string(const std::string&)> rename;
  std::map<std::string, Tensor> params;  // every parameter and buffer by name (rename's results)
  bool allow_cast = true;                // F32/F16/BF16 files into F32/F16/BF16 parameters
  int64_t chunk_bytes = kLoadChunkBytes;
  bool force_staging = false;  // tests: the staged (GPU) path on the CPU too
};

struct WeightLoadResult {
  int64_t tensors = 0, bytes = 0;  // file tensors copied and their bytes in the files
  int64_t ignored = 0;             // file tensors rename mapped to ""
  int64_t staging_bytes = 0;       // the staging buffer's size (0: none)
};

// Throws lt::Error naming the checkpoint, the tensor and (for a mismatch) both shapes or dtypes.
WeightLoadResult load_weights(const WeightFiles& files, const WeightLoadSpec& spec);

// Whether loads onto `d` go through the pinned staging buffer: cuda, and meta while it simulates CUDA.
bool load_uses_staging(Device d);

}  // namespace lt::io
