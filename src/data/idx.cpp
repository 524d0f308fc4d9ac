// IDX files (the MNIST format): a big-endian header 0x00 0x00 <type> <ndims>, ndims u32 sizes,
// then the bytes. Read through zlib's gz* functions, which also pass plain files through, so
// both the Debian .gz files and unpacked ones load. Every way a file can be wrong is one clear error.
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "core/checked_math.h"
#include "io/input_file.h"
#include "leantrain/data.h"
#include "leantrain/error.h"

namespace lt {

namespace {

constexpr int64_t kMaxIdxBytes = int64_t(4) << 30;  // data bytes one IDX file may announce

// A gzip (or plain) stream read piece by piece, so that a header announcing more than the file
// holds, or a small .gz inflating without end, costs no more memory than the data announced.
class GzReader {
 public:
  explicit GzReader(const std::string& path) : path_(path) {
    io::InputFile file(path);  // a regular file: a FIFO or /dev/zero is refused here
    f_ = gzdopen(file.fd(), "rb");
    LT_CHECK(f_ != nullptr, "cannot open '" + path + "'", "zlib could not open it for reading", "check the file");
    file.release();  // gzclose closes it now
  }
  ~GzReader() { gzclose(f_); }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  // Appends up to n bytes to `out`; returns how many came (fewer only at the end of the data).
  // A damaged stream is an error here, whether zlib says so with n < 0 or with a short read.
  int64_t read(std::vector<uint8_t>& out, int64_t n) {
    int64_t got_total = 0;
    while (got_total < n) {
      const unsigned want = unsigned(std::min<int64_t>(n - got_total, int64_t(1) << 20));
      const size_t at = out.size();
      out.resize(at + want);
      const int got = gzread(f_, out.data() + at, want);
      out.resize(at + size_t(std::max(got, 0)));
      check_stream();
      if (got <= 0) break;
      got_total += got;
    }
    return got_total;
  }

 private:
  void check_stream() {
    // A stream cut short ends with 0 bytes read and Z_BUF_ERROR, not with an error return.
    int err = Z_OK;
    std::string msg = gzerror(f_, &err);
    if (err == Z_OK) return;
    if (msg.rfind(path_ + ": ", 0) == 0) msg.erase(0, path_.size() + 2);  // zlib prefixes the path
    fail("'" + path_ + "' is corrupt", "zlib: " + msg, "download or reinstall the file");
  }

  std::string path_;
  gzFile f_ = nullptr;
};

uint32_t be32(const uint8_t* p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }

}  // namespace

IdxArray read_idx(const std::string& path, int expect_ndims) {
  GzReader in(path);
  const std::string bad = "'" + path + "' is not a valid IDX file";
  std::vector<uint8_t> head;
  in.read(head, 4);
  char want[16];
  std::snprintf(want, sizeof want, "0x%08x", 0x800u | unsigned(expect_ndims));
  LT_CHECK(head.size() >= 4, bad, "it has " + std::to_string(head.size()) + " bytes, fewer than the 4-byte magic",
           "the file is truncated: reinstall it");
  const uint32_t magic = be32(head.data());
  char got[16];
  std::snprintf(got, sizeof got, "0x%08x", magic);
  LT_CHECK(magic == (0x800u | unsigned(expect_ndims)), bad,
           std::string("bad magic ") + got + ", expected " + want + " (unsigned bytes, " +
               std::to_string(expect_ndims) + " dims)",
           "pass the matching images/labels file");
  const int64_t dims_bytes = 4 * int64_t(expect_ndims);
  LT_CHECK(in.read(head, dims_bytes) == dims_bytes, bad, "the header is truncated", "the file is truncated: reinstall it");
  IdxArray a;
  for (int d = 0; d < expect_ndims; ++d) a.dims.push_back(int64_t(be32(head.data() + 4 + 4 * d)));
  // Each dimension is below 2^32, so three of them can pass 2^64: multiply with overflow checks.
  const int64_t total = checked_product(a.dims, bad + ": the data size in its header", "the header is corrupt: reinstall the file");
  LT_CHECK(total <= kMaxIdxBytes, bad,
           "the header announces " + std::to_string(total) + " data bytes, more than the " + io::limit_str(kMaxIdxBytes) +
               " leantrain loads from an IDX file",
           "the header is corrupt: reinstall the file");
  a.data.reserve(size_t(std::min<int64_t>(total, int64_t(64) << 20)));
  const int64_t have = in.read(a.data, total);
  LT_CHECK(have == total, bad,
           "truncated: the header announces " + std::to_string(total) + " data bytes, the file has " +
               std::to_string(have),
           "reinstall or re-download the file");
  // Anything after the data is an error; count it, up to 1 MiB (a .gz can inflate without end).
  constexpr int64_t kExtraShown = int64_t(1) << 20;
  std::vector<uint8_t> extra;
  const int64_t more = in.read(extra, kExtraShown + 1);
  LT_CHECK(more == 0, bad,
           (more > kExtraShown ? "more than " + std::to_string(kExtraShown) : std::to_string(more)) +
               " unexpected bytes after the data",
           "reinstall or re-download the file");
  return a;
}

ImageSet read_idx_images(const std::string& images_path, const std::string& labels_path) {
  IdxArray img = read_idx(images_path, 3);
  IdxArray lab = read_idx(labels_path, 1);
  LT_CHECK(img.dims[0] == lab.dims[0],
           "'" + images_path + "' and '" + labels_path + "' do not match",
           std::to_string(img.dims[0]) + " images but " + std::to_string(lab.dims[0]) + " labels",
           "pass the label file of the same split");
  LT_CHECK(img.dims[0] > 0 && img.dims[1] > 0 && img.dims[2] > 0, "'" + images_path + "' holds no images",
           "its header says " + std::to_string(img.dims[0]) + " images of " + std::to_string(img.dims[1]) + "x" +
               std::to_string(img.dims[2]) + " pixels",
           "pass a file with at least one image");
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
    LT_CHECK(fs::exists(f), "Fashion-MNIST is incomplete", "missing " + f, fix);  // not a regular file: read_idx says so
  ImageSet s = read_idx_images(images, labels);
  for (int64_t i = 0; i < s.count; ++i)
    LT_CHECK(s.labels[size_t(i)] < 10, "'" + labels + "' is corrupt",
             "label " + std::to_string(s.labels[size_t(i)]) + " at index " + std::to_string(i) + " is not a class 0..9",
             "reinstall dataset-fashion-mnist");
  return s;
}

}  // namespace lt
