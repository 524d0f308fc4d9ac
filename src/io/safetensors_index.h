// model.safetensors.index.json, as transformers' save_pretrained(max_shard_size=...) writes it:
//   {"metadata": {"total_size": 123, ...}, "weight_map": {"tensor.name": "model-00001-of-00002.safetensors", ...}}
// Parsing checks the text alone (shapes and data are the shards' business, io/weight_files.h):
// a JSON object with a "weight_map" object of string values, each a plain file name in the
// index's own directory. A path ("../x", "/etc/passwd", "sub/x"), an empty name, "." or ".." is
// refused here; a symlink leaving the directory is refused when the shard is opened.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace lt::io {

inline constexpr const char* kWeightsFile = "model.safetensors";
inline constexpr const char* kWeightsIndexFile = "model.safetensors.index.json";

struct SafetensorsIndex {
  std::map<std::string, std::string> weight_map;  // tensor name -> shard file name
  std::vector<std::string> shards;                // the distinct shard names, sorted
  std::optional<int64_t> total_size;              // metadata.total_size when given (informative only)
};

// Throws lt::Error naming `path` (used in messages only) for anything but a well-formed index.
SafetensorsIndex parse_safetensors_index(const std::string& text, const std::string& path);

}  // namespace lt::io
