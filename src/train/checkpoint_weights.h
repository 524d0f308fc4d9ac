// A model's weights in a directory, a leantrain checkpoint or a Hugging Face model directory
// alike: the model's checkpoint layout (Model::checkpoint_tensors, Hugging Face names) over the
// streaming loader (io/weight_load.h) and the sharded writer (io/weight_save.h).
#pragma once
#include <map>
#include <set>
#include <string>

#include "leantrain/models.h"

namespace lt {

// Whether `dir` holds weights: model.safetensors or model.safetensors.index.json.
bool has_model_weights(const std::string& dir);

struct LoadedWeights {
  int64_t tensors = 0, bytes = 0;  // tensors copied and their bytes in the files
  int64_t files = 0;               // weight files read (shards)
  int64_t staging_bytes = 0;       // the pinned staging buffer the load took (0: none)
};

// Streams the weights of `dir` into m's parameters, on their device, in their dtype (F32, F16 and
// BF16 files cast on the way). Every name, shape and dtype is checked before anything is written;
// errors name the file and the tensor. `leantrain_checkpoint`: the weights must also share one
// dtype of those three, as leantrain saves them (a file edited since is refused, not cast).
LoadedWeights load_model_weights(const std::string& dir, models::Model& m, bool leantrain_checkpoint = false);

// As load_model_weights, for a model with NF4 layers (leantrain/nn_quant.h): a layer's
// bitsandbytes state in `dir` fills its buffers as it is; the layers named in `quantize_from`
// (module paths) are left out instead, and `float_keys` gets the file tensor holding each one's
// floating weight (the caller quantises it; train/quantize_setup.h).
LoadedWeights load_model_weights_nf4(const std::string& dir, models::Model& m, const std::set<std::string>& quantize_from,
                                     std::map<std::string, std::string>& float_keys, bool leantrain_checkpoint = false);

// Writes m's weights into `dir` (an existing directory) under Hugging Face names: model.safetensors,
// or shards of at most shard_bytes and model.safetensors.index.json, as save_pretrained does.
// `stand_ins`: values to write in place of parameters (by TensorImpl) that have none here, as
// fsdp's rank 0 writes the other ranks' (dist::CheckpointGather::host_params).
void save_model_weights(const std::string& dir, const models::Model& m, int64_t shard_bytes,
                        const std::map<const TensorImpl*, Tensor>& stand_ins = {});

// The dtype every weight in `dir` has when they share F32, BF16 or F16; F32 otherwise.
DType stored_weights_dtype(const std::string& dir);

}  // namespace lt
