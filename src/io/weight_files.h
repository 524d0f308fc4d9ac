// The weights of a Hugging Face model directory: model.safetensors, or model.safetensors.index.json
// and the shards it names (as transformers' save_pretrained writes them; a single file wins when
// both are there, as in transformers). Opening validates everything before any tensor is read:
// every shard's header (SafetensorsReader), every shard inside the directory (a symlink leaving
// it is refused), and the index against the shards (each tensor in exactly one shard, the one the
// index names). Tensors are then read from each shard's read-only memory mapping.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors_index.h"
#include "leantrain/safetensors.h"

namespace lt::io {

class WeightFiles {
 public:
  // Throws lt::Error (one line, naming the file at fault) when the directory has no weights or
  // any file or the index is bad.
  explicit WeightFiles(const std::string& dir);

  // Whether `dir` holds model.safetensors or model.safetensors.index.json (anything by that name).
  static bool present(const std::string& dir);

  struct Located {
    const SafetensorsReader* file = nullptr;
    const TensorEntry* entry = nullptr;
  };
  // Every tensor, shard by shard (shards in name order), each in data order.
  const std::vector<std::string>& names() const { return names_; }
  Located find(const std::string& name) const;  // file == nullptr when absent
  const std::vector<std::unique_ptr<SafetensorsReader>>& files() const { return files_; }
  bool sharded() const { return sharded_; }
  const std::string& dir() const { return dir_; }
  // "model.safetensors" or "model.safetensors.index.json (3 shards)", for messages.
  std::string describe() const;

 private:
  void open_single();
  void open_sharded();
  void add_file(const std::string& name);
  std::string dir_, real_dir_;
  bool sharded_ = false;
  std::vector<std::unique_ptr<SafetensorsReader>> files_;
  std::vector<std::string> names_;
  std::map<std::string, Located> where_;
};

// Why `dir`/`name` may not be read as part of the checkpoint, or "": a symlink that leads out of
// the directory (or nowhere). `real_dir` is realpath(dir).
std::string outside_dir_problem(const std::string& dir, const std::string& real_dir, const std::string& name);

}  // namespace lt::io
