// io::SafetensorsReader on arbitrary file bytes: the header checks at open, then reading every
// tensor it accepted (whose byte ranges the checks promise lie inside the file).
#include "fuzz_input.h"
#include "leantrain/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = lt::fuzz::write_input("model.safetensors", data, size);
  lt::fuzz::rejects_only_with_error([&] {
    lt::io::SafetensorsReader reader(path);
    for (const lt::io::TensorEntry& e : reader.entries()) {
      lt::fuzz::require(reader.find(e.name) == &e, "find() returns the entry of tensor '" + e.name + "'");
      lt::fuzz::require(e.begin >= 0 && e.begin <= e.end && e.end <= int64_t(size),
                        "tensor '" + e.name + "' lies inside the file");
      lt::Tensor t = reader.read(e.name);
      lt::fuzz::require(t.shape() == e.shape, "tensor '" + e.name + "' is read with its header shape");
    }
  });
  return 0;
}
