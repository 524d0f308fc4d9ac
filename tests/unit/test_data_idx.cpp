// IDX reading: tiny files crafted here (gzipped with zlib), each corruption with its error, and
// the installed Fashion-MNIST package (skipped when absent).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>

#include "leantrain/data.h"
#include "leantrain/error.h"
#include "unit/error_of.h"

using namespace lt;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("lt_test_data_idx_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::vector<uint8_t> idx_bytes(uint32_t magic, const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> b;
  auto put = [&](uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(uint8_t(v >> s));
  };
  put(magic);
  for (uint32_t d : dims) put(d);
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

void write_gz(const fs::path& p, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(p.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), unsigned(bytes.size())), int(bytes.size()));
  gzclose(f);
}

void write_raw(const fs::path& p, const std::vector<uint8_t>& bytes) {
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

// 3 images of 2x2 with labels 7, 0, 9.
std::vector<uint8_t> pixels() { return {0, 255, 51, 102, 1, 2, 3, 4, 250, 251, 252, 253}; }
std::vector<uint8_t> good_images() { return idx_bytes(0x803, {3, 2, 2}, pixels()); }
std::vector<uint8_t> good_labels() { return idx_bytes(0x801, {3}, {7, 0, 9}); }

using lt::test::error_of;

}  // namespace

TEST(DataIdx, ReadsGzippedAndPlainFiles) {
  fs::path d = temp_dir("good");
  write_gz(d / "img.gz", good_images());
  write_gz(d / "lab.gz", good_labels());
  ImageSet s = read_idx_images(d / "img.gz", d / "lab.gz");
  EXPECT_EQ(s.count, 3);
  EXPECT_EQ(s.rows, 2);
  EXPECT_EQ(s.cols, 2);
  EXPECT_EQ(s.pixels, pixels());
  EXPECT_EQ(s.labels, (std::vector<uint8_t>{7, 0, 9}));
  write_raw(d / "img.raw", good_images());
  EXPECT_EQ(read_idx(d / "img.raw", 3).dims, (std::vector<int64_t>{3, 2, 2}));
  fs::remove_all(d);
}

TEST(DataIdx, EachCorruptionHasItsError) {
  fs::path d = temp_dir("bad");
  write_gz(d / "lab.gz", good_labels());

  EXPECT_NE(error_of([&] { read_idx(d / "missing.gz", 3); }).find("does not exist"), std::string::npos);

  // Labels where images are expected: bad magic.
  EXPECT_NE(error_of([&] { read_idx(d / "lab.gz", 3); }).find("bad magic 0x00000801, expected 0x00000803"),
            std::string::npos);

  // Data shorter than the header says.
  auto img = good_images();
  img.resize(img.size() - 5);
  write_gz(d / "short.gz", img);
  EXPECT_NE(error_of([&] { read_idx(d / "short.gz", 3); }).find("truncated: the header announces 12 data bytes, the file has 7"),
            std::string::npos);

  // Header cut inside the dims.
  img = good_images();
  img.resize(9);
  write_gz(d / "hdr.gz", img);
  EXPECT_NE(error_of([&] { read_idx(d / "hdr.gz", 3); }).find("header is truncated"), std::string::npos);

  // Extra bytes after the data.
  img = good_images();
  img.push_back(0);
  write_gz(d / "long.gz", img);
  EXPECT_NE(error_of([&] { read_idx(d / "long.gz", 3); }).find("1 unexpected bytes"), std::string::npos);

  // A gzip stream cut short (a partial download).
  write_gz(d / "full.gz", idx_bytes(0x803, {50, 28, 28}, std::vector<uint8_t>(50 * 784, 7)));
  std::ifstream in(d / "full.gz", std::ios::binary);
  std::vector<char> gz((std::istreambuf_iterator<char>(in)), {});
  gz.resize(gz.size() / 2);
  write_raw(d / "cut.gz", std::vector<uint8_t>(gz.begin(), gz.end()));
  EXPECT_NE(error_of([&] { read_idx(d / "cut.gz", 3); }).find("is corrupt"), std::string::npos);

  // Images and labels of different counts.
  write_gz(d / "img.gz", good_images());
  write_gz(d / "lab2.gz", idx_bytes(0x801, {2}, {1, 2}));
  EXPECT_NE(error_of([&] { read_idx_images(d / "img.gz", d / "lab2.gz"); }).find("3 images but 2 labels"),
            std::string::npos);
  fs::remove_all(d);
}

TEST(DataIdx, FashionMnistMissingNamesThePackage) {
  fs::path d = temp_dir("fm");
  std::string e = error_of([&] { load_fashion_mnist(Split::Train, (d / "nowhere").string()); });
  EXPECT_NE(e.find("apt-get install dataset-fashion-mnist"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos);  // one line
  write_gz(d / "t10k-images-idx3-ubyte.gz", good_images());
  e = error_of([&] { load_fashion_mnist(Split::Test, d.string()); });
  EXPECT_NE(e.find("t10k-labels-idx1-ubyte.gz"), std::string::npos) << e;
  EXPECT_NE(e.find("apt-get install dataset-fashion-mnist"), std::string::npos) << e;
  // A custom directory with a label out of 0..9.
  write_gz(d / "t10k-labels-idx1-ubyte.gz", idx_bytes(0x801, {3}, {7, 10, 9}));
  EXPECT_NE(error_of([&] { load_fashion_mnist(Split::Test, d.string()); }).find("label 10 at index 1"), std::string::npos);
  write_gz(d / "t10k-labels-idx1-ubyte.gz", good_labels());
  EXPECT_EQ(load_fashion_mnist(Split::Test, d.string()).count, 3);
  fs::remove_all(d);
}

TEST(DataIdx, InstalledFashionMnist) {
  if (!fs::exists(std::string(kFashionMnistDir) + "/t10k-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  ImageSet s = load_fashion_mnist(Split::Test);
  EXPECT_EQ(s.count, 10000);
  EXPECT_EQ(s.rows, 28);
  EXPECT_EQ(s.cols, 28);
  EXPECT_EQ(s.pixels.size(), 10000u * 784u);
  EXPECT_EQ(s.labels[0], 9);  // ankle boot
  std::vector<int> per_class(10);
  for (uint8_t l : s.labels) ++per_class[l];
  for (int c : per_class) EXPECT_EQ(c, 1000);  // the test split is balanced
  // The training labels: 60000, first one 9.
  IdxArray train = read_idx(std::string(kFashionMnistDir) + "/train-labels-idx1-ubyte.gz", 1);
  EXPECT_EQ(train.dims[0], 60000);
  EXPECT_EQ(train.data[0], 9);
  EXPECT_EQ(train.data[3], 3);
}

TEST(DataIdx, SizesThatOverflowOrExceedTheCapAreRefused) {
  fs::path d = temp_dir("sizes");
  // 4 x 2^31 x 2^31 = 2^64: wraps to 0, which matched the empty data before the sizes were checked.
  write_gz(d / "wrap.gz", idx_bytes(0x803, {4, 0x80000000u, 0x80000000u}, {}));
  std::string e = error_of([&] { read_idx(d / "wrap.gz", 3); });
  EXPECT_NE(e.find("is not a valid IDX file: the data size in its header is too large"), std::string::npos) << e;
  // A product that fits but announces more than an IDX file may hold; nothing that large is allocated.
  write_gz(d / "huge.gz", idx_bytes(0x803, {65536, 65536, 2}, {1, 2, 3}));
  e = error_of([&] { read_idx(d / "huge.gz", 3); });
  EXPECT_NE(e.find("announces 8589934592 data bytes, more than the 4 GiB"), std::string::npos) << e;
  // Zero images (of 2^32-1 squared pixels, whose product no later code could form).
  write_gz(d / "none.gz", idx_bytes(0x803, {0, 0xffffffffu, 0xffffffffu}, {}));
  write_gz(d / "none_lab.gz", idx_bytes(0x801, {0}, {}));
  e = error_of([&] { read_idx_images(d / "none.gz", d / "none_lab.gz"); });
  EXPECT_NE(e.find("holds no images"), std::string::npos) << e;
  // Trailing data past 1 MiB is reported without reading it all.
  auto img = good_images();
  img.resize(img.size() + (3 << 20));
  write_gz(d / "tail.gz", img);
  EXPECT_NE(error_of([&] { read_idx(d / "tail.gz", 3); }).find("more than 1048576 unexpected bytes"), std::string::npos);
  fs::remove_all(d);
}

TEST(DataIdx, SpecialFilesAreRefusedNotRead) {
  fs::path d = temp_dir("special");
  ASSERT_EQ(::mkfifo((d / "fifo.gz").c_str(), 0600), 0);
  EXPECT_NE(error_of([&] { read_idx(d / "fifo.gz", 3); }).find("FIFO"), std::string::npos);
  EXPECT_NE(error_of([&] { read_idx("/dev/zero", 3); }).find("character device"), std::string::npos);
  // In a Fashion-MNIST directory, a FIFO in place of a file is named as such (not as "missing").
  write_gz(d / "t10k-labels-idx1-ubyte.gz", good_labels());
  ASSERT_EQ(::mkfifo((d / "t10k-images-idx3-ubyte.gz").c_str(), 0600), 0);
  EXPECT_NE(error_of([&] { load_fashion_mnist(Split::Test, d.string()); }).find("t10k-images-idx3-ubyte.gz': it is a FIFO"),
            std::string::npos);
  fs::remove_all(d);
}
