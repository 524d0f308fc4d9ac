// Writing a model's weights as transformers' save_pretrained does: one model.safetensors when they
// fit in one shard, else model-00001-of-0000N.safetensors ... and model.safetensors.index.json
// ({"metadata": {"total_size": bytes}, "weight_map": {tensor: shard}}). Every file carries the
// metadata {"format": "pt"} that from_pretrained requires. Tensors are streamed one at a time
// (save_safetensors), so a save never holds a second copy of the weights on the host.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "leantrain/tensor.h"

namespace lt::io {

inline constexpr int64_t kDefaultShardBytes = 5'000'000'000;  // transformers' "5GB"

// save_pretrained's split (huggingface_hub's split_state_dict_into_shards): in order, a tensor
// starts a new shard when it would take the current one past max_bytes; a tensor larger than
// max_bytes gets a shard of its own. Returns the tensors' indices, shard by shard.
std::vector<std::vector<size_t>> split_into_shards(const std::vector<int64_t>& bytes, int64_t max_bytes);

// The shard file names for n shards: {"model.safetensors"} for one.
std::vector<std::string> shard_file_names(size_t n);

// Writes the files into directory `dir` (existing); returns their names.
std::vector<std::string> save_weight_files(const std::string& dir,
                                           const std::vector<std::pair<std::string, Tensor>>& tensors,
                                           int64_t max_shard_bytes = kDefaultShardBytes);

}  // namespace lt::io
