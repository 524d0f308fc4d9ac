// IDX files (the MNIST format): a big-endian header 0x00 0x00 <type> <ndims>, ndims u32 sizes,
// then the bytes. Read through zlib's gz* functions, which also pass plain files through, so
// both the Debian .gz files and unpacked ones load. Every way a file can be wrong is one clear error.
#include <zlib.h>

#include <cstdio>
#include <filesystem>

#include "leantrain/data.h"
#include "leantrain/error.h"

namespace lt {

namespace {

std::vector<uint8_t> read_gzip(const std::string& path) {
  LT_CHECK(std::filesystem::is_regular_file(path), "cannot read '" + path + "'", "the file does not exist",
           "check the path");
  gzFile f = gzopen(path.c_str(), "rb");
  LT_CHECK(f != nullptr, "cannot open '" + path + "'", "it could not be opened for reading", "check its permissions");
  std::vector<uint8_t> out;
  std::vector<uint8_t> chunk(1 << 20);
  int n;
  while ((n = gzread(f, chunk.data(), unsigned(chunk.size()))) > 0) out.insert(out.end(), chunk.begin(), chunk.begin() + n);
  // A stream cut short ends with n == 0 and Z_BUF_ERROR, not n < 0: ask zlib either way.
  int err = Z_OK;
  std::string msg = gzerror(f, &err);
  if (msg.rfind(path + ": ", 0) == 0) msg.erase(0, path.size() + 2);  // zlib prefixes the path
  gzclose(f);
  LT_CHECK(n == 0 && err == Z_OK, "'" + path + "' is corrupt", "zlib: " + msg, "download or reinstall the file");
  return out;
}

uint32_t be32(const uint8_t* p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }

}  // namespace

IdxArray read_idx(const std::string& path, int expect_ndims) {
  std::vector<uint8_t> bytes = read_gzip(path);
  const std::string bad = "'" + path + "' is not a valid IDX file";
  char want[16];
  std::snprintf(want, sizeof want, "0x%08x", 0x800u | unsigned(expect_ndims));
  LT_CHECK(bytes.size() >= 4, bad, "it has " + std::to_string(bytes.size()) + " bytes, fewer than the 4-byte magic",
           "the file is truncated: reinstall it");
  const uint32_t magic = be32(bytes.data());
  char got[16];
  std::snprintf(got, sizeof got, "0x%08x", magic);
  LT_CHECK(magic == (0x800u | unsigned(expect_ndims)), bad,
           std::string("bad magic ") + got + ", expected " + want + " (unsigned bytes, " +
               std::to_string(expect_ndims) + " dims)",
           "pass the matching images/labels file");
  const size_t header = 4 + 4 * size_t(expect_ndims);
  LT_CHECK(bytes.size() >= header, bad, "the header is truncated", "the file is truncated: reinstall it");
  IdxArray a;
  int64_t total = 1;
  for (int d = 0; d < expect_ndims; ++d) {
    a.dims.push_back(int64_t(be32(bytes.data() + 4 + 4 * d)));
    total *= a.dims.back();
  }
  const int64_t have = int64_t(bytes.size() - header);
  LT_CHECK(have >= total, bad,
           "truncated: the header announces " + std::to_string(total) + " data bytes, the file has " +
               std::to_string(have),
           "reinstall or re-download the file");
  LT_CHECK(have == total, bad, std::to_string(have - total) + " unexpected bytes after the data",
           "reinstall or re-download the file");
  a.data.assign(bytes.begin() + int64_t(header), bytes.end());
  return a;
}

ImageSet read_idx_images(const std::string& images_path, const std::string& labels_path) {
  IdxArray img = read_idx(images_path, 3);
  IdxArray lab = read_idx(labels_path, 1);
  LT_CHECK(img.dims[0] == lab.dims[0],
           "'" + images_path + "' and '" + labels_path + "' do not match",
           std::to_string(img.dims[0]) + " images but " + std::to_string(lab.dims[0]) + " labels",
           "pass the label file of the same split");
  ImageSet s;
  s.count = img.dims[0];
  s.rows = img.dims[1];
  s.cols = img.dims[2];
  s.pixels = std::move(img.data);
  s.labels = std::move(lab.data);
  return s;
}

ImageSet load_fashion_mnist(Split split, const std::string& dir) {
  const std::string fix = "apt-get install dataset-fashion-mnist, or point to a directory with the four IDX files";
  namespace fs = std::filesystem;
  LT_CHECK(fs::is_directory(dir), "Fashion-MNIST not found", "no directory " + dir, fix);
  const std::string prefix = split == Split::Train ? "train" : "t10k";
  const std::string images = (fs::path(dir) / (prefix + "-images-idx3-ubyte.gz")).string();
  const std::string labels = (fs::path(dir) / (prefix + "-labels-idx1-ubyte.gz")).string();
  for (const std::string& f : {images, labels})
    LT_CHECK(fs::is_regular_file(f), "Fashion-MNIST is incomplete", "missing " + f, fix);
  ImageSet s = read_idx_images(images, labels);
  for (int64_t i = 0; i < s.count; ++i)
    LT_CHECK(s.labels[size_t(i)] < 10, "'" + labels + "' is corrupt",
             "label " + std::to_string(s.labels[size_t(i)]) + " at index " + std::to_string(i) + " is not a class 0..9",
             "reinstall dataset-fashion-mnist");
  return s;
}

}  // namespace lt
