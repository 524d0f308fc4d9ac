// read_idx on arbitrary file bytes (gzipped or plain), as a label file (1 dim) and as an image
// file (3 dims), then what training does with an accepted image file: an ImageDataset reading
// its first and last image.
#include <memory>
#include <vector>

#include "fuzz_input.h"
#include "leantrain/data.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = lt::fuzz::write_input("input-idx-ubyte.gz", data, size);
  lt::fuzz::rejects_only_with_error([&] {
    lt::IdxArray labels = lt::read_idx(path, 1);
    lt::fuzz::require(labels.dims.size() == 1 && int64_t(labels.data.size()) == labels.dims[0],
                      "a label file holds dims[0] bytes");
  });
  lt::fuzz::rejects_only_with_error([&] {
    lt::IdxArray images = lt::read_idx(path, 3);
    lt::fuzz::require(images.dims.size() == 3, "an image file has 3 dims");
    auto set = std::make_shared<lt::ImageSet>();
    set->count = images.dims[0];
    set->rows = images.dims[1];
    set->cols = images.dims[2];
    // No images (count 0, or images of 0 pixels) is a valid file with nothing for a data set to read.
    if (images.data.empty()) return;
    const int64_t image_bytes = lt::fuzz::mul(set->rows, set->cols, "rows x cols");
    lt::fuzz::require(int64_t(images.data.size()) == lt::fuzz::mul(set->count, image_bytes, "count x rows x cols"),
                      "an image file holds count x rows x cols bytes");
    set->pixels = std::move(images.data);
    set->labels.assign(size_t(set->count), 0);  // count <= the file's size here
    lt::ImageDataset ds(set);
    std::vector<float> pixels(static_cast<size_t>(image_bytes));
    int64_t label = -1;
    ds.get(0, pixels.data(), &label);
    ds.get(ds.size() - 1, pixels.data(), &label);
  });
  return 0;
}
