// Loading a module by name: plan first (names, shapes, dtypes all checked), then stream. A bad
// file therefore leaves the module untouched instead of half loaded.
#include <map>

#include "io/name_list.h"
#include "leantrain/error.h"
#include "leantrain/nn.h"
#include "leantrain/safetensors.h"

namespace lt::io {

LoadResult load_module(nn::Module& module, const std::string& path, const LoadOptions& options) {
  SafetensorsReader reader(path);
  std::map<std::string, Tensor*> slots;
  std::vector<std::string> order;
  // Parameters, then buffers (saved with the module too), each by its dotted name.
  auto params = module.named_parameter_slots();
  auto buffers = module.named_buffer_slots();
  params.insert(params.end(), buffers.begin(), buffers.end());
  for (auto& [name, slot] : params) {
    slots[name] = slot;
    order.push_back(name);
  }
  LoadResult result;
  std::map<std::string, std::string> source;  // parameter -> file tensor
  for (const TensorEntry& e : reader.entries()) {
    std::string name = options.rename ? options.rename(e.name) : module.checkpoint_key_to_name(e.name);
    if (name.empty()) {
      result.skipped.push_back(e.name);
      continue;
    }
    if (!slots.count(name)) {
      result.unexpected.push_back(e.name);
      continue;
    }
    auto [it, fresh] = source.emplace(name, e.name);
    LT_CHECK(fresh, "ambiguous checkpoint '" + path + "'",
             "tensors '" + it->second + "' and '" + e.name + "' both map to parameter '" + name + "'",
             "remove one of them from the file");
  }
  for (const std::string& name : order)
    if (!source.count(name)) result.missing.push_back(name);
  LT_CHECK(!options.strict || result.unexpected.empty(),
           "unexpected tensor " + first_of(result.unexpected) + " in '" + path + "'",
           "the model has no parameter or buffer of that name", "load the file into the model it was saved from, or load non-strictly");
  LT_CHECK(options.allow_missing || result.missing.empty(),
           "parameter " + first_of(result.missing) + " is missing from '" + path + "'",
           "the file does not contain every parameter of the model", "use a checkpoint of this model configuration");
  for (const std::string& name : order) {
    auto src = source.find(name);
    if (src == source.end()) continue;
    const TensorEntry& e = *reader.find(src->second);
    const Tensor& p = *slots[name];
    LT_CHECK(e.shape == p.shape(), "shape mismatch for parameter '" + name + "'",
             "the file '" + path + "' has " + shape_str(e.shape) + ", the model has " + shape_str(p.shape()),
             "use a checkpoint of this model configuration");
    LT_CHECK(options.allow_cast || e.dtype == p.dtype(), "dtype mismatch for parameter '" + name + "'",
             std::string("the file '") + path + "' has " + dtype_safetensors_name(e.dtype) + ", the model has " +
                 dtype_safetensors_name(p.dtype()),
             "build the model in the file's dtype or allow casting on load");
  }
  for (const std::string& name : order) {
    auto src = source.find(name);
    if (src == source.end()) continue;
    reader.read_into(src->second, *slots[name], options.allow_cast);
    result.loaded.push_back(name);
  }
  return result;
}

void save_module(const nn::Module& module, const std::string& path, const std::map<std::string, std::string>& metadata) {
  // transformers' from_pretrained rejects a file whose metadata lacks a known "format".
  std::map<std::string, std::string> meta = metadata;
  meta.emplace("format", "pt");
  std::vector<std::pair<std::string, Tensor>> tensors = module.named_parameters();
  for (auto& b : module.named_buffers()) tensors.push_back(b);
  save_safetensors(path, tensors, meta);
}

}  // namespace lt::io
