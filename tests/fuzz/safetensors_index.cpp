// model.safetensors.index.json on arbitrary text: the parser alone, then the whole sharded
// directory (io::WeightFiles) with the input as its index beside two fixed, valid shards
// ("a.weight" and "b.weight" in model-00001-of-00002.safetensors, "c.weight" in
// model-00002-of-00002.safetensors), so the index's cross-checks against the shards (missing,
// unlisted, misplaced tensors; shards that are paths, missing or outside) run on every input.
#include "fuzz_input.h"
#include "io/safetensors_index.h"
#include "io/weight_files.h"
#include "leantrain/ops.h"
#include "leantrain/safetensors.h"

namespace {

const std::string& shard_dir() {
  static const std::string dir = [] {
    const std::string d = (lt::fuzz::scratch_dir() / "ckpt").string();
    std::filesystem::create_directories(d);
    lt::io::save_safetensors(d + "/model-00001-of-00002.safetensors",
                             {{"a.weight", lt::zeros({2, 3})}, {"b.weight", lt::zeros({4}, lt::DType::BF16)}});
    lt::io::save_safetensors(d + "/model-00002-of-00002.safetensors", {{"c.weight", lt::zeros({1})}});
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(lt::fuzz::as_text(data, size));
  lt::fuzz::rejects_only_with_error([&] {
    const lt::io::SafetensorsIndex idx = lt::io::parse_safetensors_index(text, "index.json");
    for (const auto& [tensor, shard] : idx.weight_map)
      lt::fuzz::require(!shard.empty() && shard.find('/') == std::string::npos && shard != "..",
                        "shard '" + shard + "' of an accepted index is a plain file name");
  });
  const std::string& dir = shard_dir();
  lt::fuzz::write_input("ckpt/model.safetensors.index.json", data, size);
  lt::fuzz::rejects_only_with_error([&] {
    lt::io::WeightFiles files(dir);
    lt::fuzz::require(files.sharded(), "the directory is read through its index");
    for (const std::string& name : files.names()) {
      const lt::io::WeightFiles::Located at = files.find(name);
      lt::fuzz::require(at.file && at.entry && at.entry->name == name, "tensor '" + name + "' is found where listed");
    }
  });
  return 0;
}
