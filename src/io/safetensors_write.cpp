// Writing safetensors: offsets are known from shapes alone, so the header goes first and each
// tensor is then streamed (a device tensor is staged to the host one at a time). The header
// is space-padded to a multiple of 8 bytes as the reference writer does, keeping data aligned.
#include <nlohmann/json.hpp>
#include <set>

#include "io/file_io.h"
#include "leantrain/autograd.h"
#include "leantrain/error.h"
#include "leantrain/ops.h"
#include "leantrain/safetensors.h"

namespace lt::io {

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> seen;
  int64_t pos = 0;
  for (const auto& [name, t] : tensors) {
    LT_CHECK(!name.empty() && name != "__metadata__", "cannot save a tensor named '" + name + "' to '" + path + "'",
             "the name is empty or reserved", "rename the tensor");
    LT_CHECK(seen.insert(name).second, "cannot save '" + path + "'", "the tensor name '" + name + "' appears twice",
             "give each tensor a unique name");
    LT_CHECK(t.defined(), "cannot save tensor '" + name + "' to '" + path + "'", "it is undefined",
             "pass a defined tensor");
    LT_CHECK(!t.device().is_meta(), "cannot save tensor '" + name + "' to '" + path + "'",
             "it is on the meta device and has no data", "save from a cpu or cuda run");
    header[name] = {{"dtype", dtype_safetensors_name(t.dtype())},
                    {"shape", t.shape()},
                    {"data_offsets", {pos, pos + t.nbytes()}}};
    pos += t.nbytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t n = text.size();

  detail::AtomicFile f(path);
  f.write(&n, 8);  // little-endian host (checked in safetensors_read.cpp)
  f.write(text.data(), int64_t(n));
  NoGradGuard no_grad;
  for (const auto& [name, t] : tensors) {
    if (t.nbytes() == 0) continue;
    if (t.device().is_cpu() && t.is_contiguous()) {
      f.write(t.raw_data(), t.nbytes());
      continue;
    }
    MemoryCategoryScope other(Category::Other);
    Tensor host = Tensor::empty(t.shape(), t.dtype(), Device::cpu());
    copy_(host, t);
    f.write(host.raw_data(), host.nbytes());
  }
  f.commit();
}

}  // namespace lt::io
