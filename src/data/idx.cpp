// IDX files (the MNIST format): a big-endian header 0x00 0x00 <type> <ndims>, ndims u32 sizes,
// then the bytes. Gzip data is inflated and a plain file passed through, so both the Debian .gz
// files and unpacked ones load. Every way a file can be wrong is one clear error.
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
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
// Inflated with zlib's z_stream rather than gzread, which ignores whatever follows the last gzip
// member: here a file continues only with another member, and anything else is an error.
class GzReader {
 public:
  explicit GzReader(const std::string& path) : path_(path), file_(path) {  // a FIFO or /dev/zero is refused here
    fill();
    gzip_ = avail_ >= 2 && in_[0] == 0x1f && in_[1] == 0x8b;
    if (gzip_) start_member();
  }
  ~GzReader() {
    if (inflating_) inflateEnd(&z_);
  }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  // Appends up to n bytes to `out`; returns how many came (fewer only at the end of the data).
  int64_t read(std::vector<uint8_t>& out, int64_t n) {
    int64_t got_total = 0;
    while (got_total < n) {
      const size_t want = size_t(std::min<int64_t>(n - got_total, int64_t(1) << 20));
      const size_t at = out.size();
      out.resize(at + want);
      const size_t got = gzip_ ? inflate_some(out.data() + at, want) : copy_some(out.data() + at, want);
      out.resize(at + got);
      if (got == 0) break;
      got_total += int64_t(got);
    }
    return got_total;
  }

 private:
  void fill() {  // more file bytes into in_, when what is there is used up
    if (avail_ > 0 || eof_) return;
    const ssize_t got = ::read(file_.fd(), in_, sizeof in_);
    if (got < 0) fail("cannot read '" + path_ + "'", std::strerror(errno), "check the file and the disk");
    if (got == 0) eof_ = true;
    next_ = in_;
    avail_ = size_t(std::max<ssize_t>(got, 0));
  }
  size_t copy_some(uint8_t* out, size_t want) {
    fill();
    const size_t n = std::min(want, avail_);
    std::memcpy(out, next_, n);
    next_ += n;
    avail_ -= n;
    return n;
  }
  void start_member() {
    z_ = z_stream{};
    if (inflateInit2(&z_, 16 + MAX_WBITS) != Z_OK) fail("cannot read '" + path_ + "'", "zlib could not start", "");
    inflating_ = true;
  }
  [[noreturn]] void corrupt(const std::string& why) {
    fail("'" + path_ + "' is corrupt", why, "download or reinstall the file");
  }
  size_t inflate_some(uint8_t* out, size_t want) {
    size_t made = 0;
    while (made < want && inflating_) {
      fill();
      if (avail_ == 0) corrupt("zlib: the gzip stream is cut short");
      z_.next_in = next_;
      z_.avail_in = unsigned(avail_);
      z_.next_out = out + made;
      z_.avail_out = unsigned(want - made);
      const int rc = inflate(&z_, Z_NO_FLUSH);
      made = size_t(z_.next_out - out);
      next_ = z_.next_in;
      avail_ = z_.avail_in;
      if (rc == Z_STREAM_END) {
        inflateEnd(&z_);
        inflating_ = false;
        next_member();
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        corrupt("zlib: " + std::string(z_.msg ? z_.msg : "the gzip stream is damaged"));
      }
    }
    return made;
  }
  // After a member's end: the file ends, or another gzip member starts; anything else is garbage.
  void next_member() {
    fill();
    if (avail_ == 0) return;
    if (avail_ >= 2 && next_[0] == 0x1f && next_[1] == 0x8b) return start_member();
    int64_t extra = int64_t(avail_);
    for (avail_ = 0, fill(); avail_ > 0; avail_ = 0, fill()) extra += int64_t(avail_);
    corrupt(std::to_string(extra) + " bytes after the end of its gzip stream that are not gzip data");
  }

  std::string path_;
  io::InputFile file_;
  uint8_t in_[1 << 16];
  uint8_t* next_ = in_;
  size_t avail_ = 0;
  bool eof_ = false, gzip_ = false, inflating_ = false;
  z_stream z_{};
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
