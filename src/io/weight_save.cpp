#include "io/weight_save.h"

#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "io/file_io.h"
#include "io/safetensors_index.h"
#include "leantrain/error.h"
#include "leantrain/safetensors.h"

namespace lt::io {

std::vector<std::vector<size_t>> split_into_shards(const std::vector<int64_t>& bytes, int64_t max_bytes) {
  LT_ASSERT(max_bytes > 0);
  std::vector<std::vector<size_t>> shards;
  std::vector<size_t> current;
  int64_t current_bytes = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] > max_bytes) {  // its own shard; the current one goes on filling after it
      shards.push_back({i});
      continue;
    }
    if (current_bytes + bytes[i] > max_bytes) {
      shards.push_back(std::move(current));
      current.clear();
      current_bytes = 0;
    }
    current.push_back(i);
    current_bytes += bytes[i];
  }
  if (!current.empty() || shards.empty()) shards.push_back(std::move(current));
  return shards;
}

std::vector<std::string> shard_file_names(size_t n) {
  if (n == 1) return {kWeightsFile};
  std::vector<std::string> names;
  for (size_t k = 1; k <= n; ++k) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", k, n);
    names.push_back(buf);
  }
  return names;
}

std::vector<std::string> save_weight_files(const std::string& dir,
                                           const std::vector<std::pair<std::string, Tensor>>& tensors,
                                           int64_t max_shard_bytes) {
  std::vector<int64_t> bytes;
  int64_t total = 0;
  for (const auto& [name, t] : tensors) {
    bytes.push_back(t.nbytes());
    total += t.nbytes();
  }
  const auto shards = split_into_shards(bytes, max_shard_bytes);
  const std::vector<std::string> names = shard_file_names(shards.size());
  const std::map<std::string, std::string> meta{{"format", "pt"}};
  nlohmann::json weight_map = nlohmann::json::object();  // sorted by tensor name, as transformers writes it
  for (size_t s = 0; s < shards.size(); ++s) {
    std::vector<std::pair<std::string, Tensor>> part;
    for (size_t i : shards[s]) {
      part.push_back(tensors[i]);
      weight_map[tensors[i].first] = names[s];
    }
    save_safetensors(dir + "/" + names[s], part, meta);
  }
  if (shards.size() > 1) {
    nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    detail::AtomicFile f(dir + "/" + kWeightsIndexFile);
    f.write(index.dump(2) + "\n");
    f.commit();
  }
  return names;
}

}  // namespace lt::io
