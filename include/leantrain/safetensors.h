// The safetensors format, byte for byte: an 8-byte little-endian header length N, N bytes of
// JSON ({name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
// space-padded to 8 bytes), then the raw little-endian tensor bytes, offsets relative to the
// end of the header. Files written here load with the Python `safetensors` package and back.
//
// Reading opens the file once, validates the whole header, then reads one tensor at a time
// (pread) straight into its destination, so loading a model never holds a host copy of more
// than one tensor. Writing goes to a temp file in the same directory, is fsync'ed, then renamed
// over the target: a crash leaves the old file or the new one, never a torn one.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "leantrain/tensor.h"

namespace lt::nn {
class Module;
}

namespace lt::io {

struct TensorEntry {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  int64_t begin = 0, end = 0;  // byte range within the data section
};

class SafetensorsReader {
 public:
  // Throws lt::Error (one line, naming the file) for a missing file, a file shorter than 8
  // bytes, a header length beyond the file, malformed JSON, an unknown dtype, or data_offsets
  // out of range / inconsistent with shape x dtype / overlapping.
  explicit SafetensorsReader(const std::string& path);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<TensorEntry>& entries() const { return entries_; }  // in data order
  const TensorEntry* find(const std::string& name) const;                // nullptr when absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Streams tensor `name` into `dst` (any device, any strides). The shape must match; the
  // dtype too unless allow_cast. A meta `dst` is only checked.
  void read_into(const std::string& name, const Tensor& dst, bool allow_cast = false) const;
  // A new tensor on `device`, allocated in the current memory category.
  Tensor read(const std::string& name, Device device = Device::cpu()) const;

  // The data section, memory-mapped read-only on first use (nullptr when it is empty): tensor
  // e's bytes are at mapped_data() + e.begin. The mapping is file-backed page cache, not a host
  // copy; it lives until unmap() or the reader's end. (A file truncated by someone else while
  // mapped makes the next access fault: the shards must stay put while a load runs.)
  const uint8_t* mapped_data() const;
  void unmap() const;
  // Drops this process's mapped pages of data bytes [begin, end) (they stay in the page cache),
  // so a load's resident memory stays bounded by the tensor at hand.
  void release_pages(int64_t begin, int64_t end) const;
  int64_t data_bytes() const { return data_len_; }

 private:
  void parse_header();
  std::string path_;
  int fd_ = -1;
  int64_t data_start_ = 0, data_len_ = 0;
  mutable void* map_ = nullptr;  // the whole file (mmap offsets must be page-aligned)
  mutable int64_t map_len_ = 0;
  std::vector<TensorEntry> entries_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// Writes tensors (any devices; staged to the host one at a time) in the given order, atomically.
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});
// Reads every tensor onto `device` (current memory category); metadata goes to *metadata if given.
std::map<std::string, Tensor> load_safetensors(const std::string& path, Device device = Device::cpu(),
                                               std::map<std::string, std::string>* metadata = nullptr);

// ---- modules: parameters by name ----

struct LoadOptions {
  bool strict = true;          // a file tensor that maps to no parameter is an error
  bool allow_missing = false;  // a parameter absent from the file is an error unless set
  bool allow_cast = false;     // a dtype differing from the parameter's is an error unless set
  // File name -> parameter name ("" skips the tensor). Default: module.checkpoint_key_to_name.
  std::function<std::string(const std::string&)> rename;
};

struct LoadResult {
  std::vector<std::string> loaded;      // parameter names filled from the file
  std::vector<std::string> missing;     // parameters not in the file (allow_missing)
  std::vector<std::string> unexpected;  // file tensors matching no parameter (!strict)
  std::vector<std::string> skipped;     // file tensors the rename mapped to ""
};

// Checks every name, shape and dtype before writing anything, then streams each tensor into
// its parameter on the parameter's device. Errors name the tensor and give both shapes/dtypes.
LoadResult load_module(nn::Module& module, const std::string& path, const LoadOptions& options = {});
// Saves named_parameters() (a tied weight once, under its first name), with metadata
// "format": "pt" added unless given, so transformers' from_pretrained accepts the file.
void save_module(const nn::Module& module, const std::string& path,
                 const std::map<std::string, std::string>& metadata = {});

}  // namespace lt::io
