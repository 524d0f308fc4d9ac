// Safetensors: exact bytes against the reference writer, round trips of every dtype, and one
// crafted file per way a header can be wrong (each must give a one-line lt::Error).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "leantrain/error.h"
#include "leantrain/ops.h"
#include "leantrain/safetensors.h"

using namespace lt;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir() {
  auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  fs::path d = fs::temp_directory_path() / ("lt_st_" + std::to_string(::getpid()) + "_" + info->name());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

// A file with the given JSON header (length prefix added) and data section.
std::string st_file(const std::string& header, const std::string& data) {
  uint64_t n = header.size();
  std::string out(reinterpret_cast<const char*>(&n), 8);
  return out + header + data;
}

// Runs f, expects an lt::Error whose one-line message contains every fragment.
template <class F>
void expect_error(F&& f, std::initializer_list<std::string> fragments) {
  try {
    f();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const auto& frag : fragments) EXPECT_NE(msg.find(frag), std::string::npos) << "'" << frag << "' not in: " << msg;
  }
}

const std::string kI32Header = R"({"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}})";

}  // namespace

TEST(SafetensorsFormat, WriterMatchesReferenceBytes) {
  // The reference writer: 8-byte LE length, compact JSON padded with spaces to 8 bytes, raw data.
  fs::path d = temp_dir();
  Tensor t = from_ints({1, 2, 3, 4}, {2, 2}, DType::I32);
  io::save_safetensors((d / "a.safetensors").string(), {{"test", t}});
  std::string data("\x01\0\0\0\x02\0\0\0\x03\0\0\0\x04\0\0\0", 16);
  EXPECT_EQ(slurp(d / "a.safetensors"), st_file(kI32Header + "    ", data));
}

TEST(SafetensorsFormat, ReadsReferenceFiles) {
  // Byte strings from the reference package's own tests (unpadded, and 7 spaces of padding).
  fs::path d = temp_dir();
  std::string zeros(16, '\0');
  write_bytes(d / "plain.safetensors", st_file(kI32Header, zeros));
  write_bytes(d / "meta.safetensors",
              st_file(R"({"__metadata__":{"framework":"pt"},"test1":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}})"
                      "       ",
                      zeros));
  io::SafetensorsReader a((d / "plain.safetensors").string());
  ASSERT_EQ(a.entries().size(), 1u);
  EXPECT_EQ(a.read("test").to_int_vector(), (std::vector<int64_t>{0, 0, 0, 0}));
  std::map<std::string, std::string> meta;
  auto m = io::load_safetensors((d / "meta.safetensors").string(), Device::cpu(), &meta);
  EXPECT_EQ(meta.at("framework"), "pt");
  EXPECT_EQ(m.at("test1").shape(), Shape({2, 2}));
  EXPECT_EQ(m.at("test1").dtype(), DType::I32);
}

TEST(SafetensorsFormat, RoundTripEveryDtypeWithMetadata) {
  fs::path d = temp_dir();
  std::vector<float> v{1.5f, -2.25f, 3.0f, 0.125f, -7.0f, 42.0f};
  Tensor base = from_vector(v, {2, 3});
  std::vector<std::pair<std::string, Tensor>> ts = {
      {"f32", base},
      {"f64", from_vector(std::vector<double>{1e-300, 2.5}, {2})},
      {"f16", base.to(DType::F16)},
      {"bf16", base.to(DType::BF16)},
      {"i32", from_ints({-1, 7}, {2}, DType::I32)},
      {"i64", from_ints({int64_t(1) << 40, -3}, {1, 2})},
      {"u8", from_ints({0, 255, 9}, {3}, DType::U8)},
      {"empty", zeros({0, 4})},
      {"scalar", full({}, 3.5)},
      {"transposed", transpose(base, 0, 1)},  // a strided view is written in logical order
  };
  std::map<std::string, std::string> meta{{"step", "17"}, {"note", "héllo \"quoted\""}};
  std::string path = (d / "all.safetensors").string();
  io::save_safetensors(path, ts, meta);
  std::map<std::string, std::string> got_meta;
  auto got = io::load_safetensors(path, Device::cpu(), &got_meta);
  EXPECT_EQ(got_meta, meta);
  ASSERT_EQ(got.size(), ts.size());
  for (auto& [name, t] : ts) {
    SCOPED_TRACE(name);
    const Tensor& g = got.at(name);
    EXPECT_EQ(g.dtype(), t.dtype());
    EXPECT_EQ(g.shape(), t.shape());
    if (is_floating(t.dtype())) EXPECT_EQ(g.to_double_vector(), t.contiguous().to_double_vector());
    else EXPECT_EQ(g.to_int_vector(), t.to_int_vector());
  }
  // Header length is a multiple of 8 and data starts right after it.
  std::string bytes = slurp(path);
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes[8], '{');
}

TEST(SafetensorsFormat, ReadIntoCastsOnlyWhenAllowed) {
  fs::path d = temp_dir();
  std::string path = (d / "c.safetensors").string();
  io::save_safetensors(path, {{"w", from_vector(std::vector<float>{1, 2, 3}, {3})}});
  io::SafetensorsReader r(path);
  Tensor dst = zeros({3}, DType::BF16);
  expect_error([&] { r.read_into("w", dst); }, {"dtype mismatch", "'w'", "F32", "BF16"});
  r.read_into("w", dst, /*allow_cast=*/true);
  EXPECT_EQ(dst.to_float_vector(), (std::vector<float>{1, 2, 3}));
  expect_error([&] { r.read_into("w", zeros({4})); }, {"shape mismatch", "'w'", "[3]", "[4]"});
  expect_error([&] { r.read("nope"); }, {"'nope'", "not in"});
  Tensor base = zeros({6});
  r.read_into("w", make_view(base, {3}, {2}, 0));  // a strided destination is filled in place
  EXPECT_EQ(base.to_float_vector(), (std::vector<float>{1, 0, 2, 0, 3, 0}));
}

TEST(SafetensorsFormat, AtomicWriteReplacesAndLeavesNoTempFiles) {
  fs::path d = temp_dir();
  std::string path = (d / "ckpt.safetensors").string();
  io::save_safetensors(path, {{"a", ones({2})}});
  io::save_safetensors(path, {{"b", zeros({3})}});
  io::SafetensorsReader r(path);
  ASSERT_EQ(r.entries().size(), 1u);
  EXPECT_EQ(r.entries()[0].name, "b");
  // A failing save (meta tensor has no data) leaves the previous file as it was.
  expect_error([&] { io::save_safetensors(path, {{"m", zeros({2}, DType::F32, Device::meta())}}); }, {"meta"});
  EXPECT_NE(io::SafetensorsReader(path).find("b"), nullptr);
  expect_error([&] { io::save_safetensors((d / "no_dir" / "x.safetensors").string(), {{"a", ones({1})}}); },
               {"cannot write", "no_dir"});
  expect_error([&] { io::save_safetensors(path, {{"a", ones({1})}, {"a", ones({1})}}); }, {"'a'", "twice"});
  int entries = 0;
  for (auto& e : fs::directory_iterator(d)) {
    ++entries;
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
  }
  EXPECT_EQ(entries, 1);
}

// ---- one crafted file per error ----

TEST(SafetensorsErrors, MissingFile) {
  fs::path d = temp_dir();
  expect_error([&] { io::SafetensorsReader r((d / "absent.safetensors").string()); },
               {"cannot read", "absent.safetensors", "does not exist"});
}

TEST(SafetensorsErrors, SpecialFilesAreRefusedAtOpen) {
  fs::path d = temp_dir();
  ASSERT_EQ(::mkfifo((d / "model.safetensors").c_str(), 0600), 0);  // a plain open() would block for a writer
  expect_error([&] { io::SafetensorsReader r((d / "model.safetensors").string()); },
               {"model.safetensors", "FIFO", "not a regular file"});
  expect_error([&] { io::SafetensorsReader r("/dev/zero"); }, {"/dev/zero", "character device"});
  expect_error([&] { io::SafetensorsReader r(d.string()); }, {"is a directory"});
}

TEST(SafetensorsErrors, ShapesWhoseSizeOverflows) {
  fs::path d = temp_dir();
  // 2^32 x 2^32 elements: the element count does not fit 64 bits.
  write_bytes(d / "c.safetensors",
              st_file(R"({"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", ""));
  expect_error([&] { io::SafetensorsReader r((d / "c.safetensors").string()); },
               {"'t'", "element count", "too large", "4294967296 * 4294967296"});
  // 2^61 elements fit, their 2^63 bytes of F32 do not.
  write_bytes(d / "b.safetensors",
              st_file(R"({"t":{"dtype":"F32","shape":[2305843009213693952],"data_offsets":[0,0]}})", ""));
  expect_error([&] { io::SafetensorsReader r((d / "b.safetensors").string()); }, {"'t'", "byte size", "too large"});
  // A dimension past INT64_MAX.
  write_bytes(d / "n.safetensors",
              st_file(R"({"t":{"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,0]}})", ""));
  expect_error([&] { io::SafetensorsReader r((d / "n.safetensors").string()); }, {"'t'", "bad shape"});
}

TEST(SafetensorsErrors, ShorterThanEightBytes) {
  fs::path d = temp_dir();
  write_bytes(d / "s.safetensors", "abc");
  expect_error([&] { io::SafetensorsReader r((d / "s.safetensors").string()); }, {"3 bytes", "8-byte"});
}

TEST(SafetensorsErrors, HeaderLengthBeyondFile) {
  fs::path d = temp_dir();
  std::string f = st_file(kI32Header, std::string(16, '\0'));
  uint64_t huge = 1000;
  std::memcpy(f.data(), &huge, 8);
  write_bytes(d / "h.safetensors", f);
  expect_error([&] { io::SafetensorsReader r((d / "h.safetensors").string()); },
               {"header length 1000", "past the end"});
}

TEST(SafetensorsErrors, MalformedJson) {
  fs::path d = temp_dir();
  write_bytes(d / "j.safetensors", st_file(R"({"test":{"dtype":"I32",)", ""));
  expect_error([&] { io::SafetensorsReader r((d / "j.safetensors").string()); }, {"not valid JSON"});
  write_bytes(d / "k.safetensors", st_file(R"(["a"])", ""));
  expect_error([&] { io::SafetensorsReader r((d / "k.safetensors").string()); }, {"start with '{'"});
  write_bytes(d / "l.safetensors", st_file(R"({"t":{"dtype":"F32","shape":[1]}})", ""));
  expect_error([&] { io::SafetensorsReader r((d / "l.safetensors").string()); }, {"'t'", "data_offsets"});
  write_bytes(d / "m.safetensors", st_file(R"({"__metadata__":{"k":1}})", ""));
  expect_error([&] { io::SafetensorsReader r((d / "m.safetensors").string()); }, {"__metadata__", "'k'"});
}

TEST(SafetensorsErrors, UnknownDtype) {
  fs::path d = temp_dir();
  write_bytes(d / "u.safetensors", st_file(R"({"t":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", "ab"));
  expect_error([&] { io::SafetensorsReader r((d / "u.safetensors").string()); }, {"'t'", "F8_E4M3", "dtype"});
}

TEST(SafetensorsErrors, OffsetsOutOfRange) {
  fs::path d = temp_dir();
  write_bytes(d / "o.safetensors",
              st_file(R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", std::string(8, '\0')));
  expect_error([&] { io::SafetensorsReader r((d / "o.safetensors").string()); },
               {"'t'", "beyond the data section", "8 bytes"});
}

TEST(SafetensorsErrors, OffsetsInconsistentWithShape) {
  fs::path d = temp_dir();
  write_bytes(d / "i.safetensors",
              st_file(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", std::string(16, '\0')));
  expect_error([&] { io::SafetensorsReader r((d / "i.safetensors").string()); },
               {"'t'", "16 bytes", "[3]", "needs 12"});
  write_bytes(d / "r.safetensors",
              st_file(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", std::string(8, '\0')));
  expect_error([&] { io::SafetensorsReader r((d / "r.safetensors").string()); }, {"'t'", "data_offsets"});
}

TEST(SafetensorsErrors, OverlapGapAndTrailingBytes) {
  fs::path d = temp_dir();
  write_bytes(d / "ov.safetensors",
              st_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                      std::string(8, '\0')));
  expect_error([&] { io::SafetensorsReader r((d / "ov.safetensors").string()); }, {"'b'", "overlap or leave a gap"});
  write_bytes(d / "gap.safetensors",
              st_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", std::string(8, '\0')));
  expect_error([&] { io::SafetensorsReader r((d / "gap.safetensors").string()); }, {"'a'", "starts at byte 4"});
  write_bytes(d / "tail.safetensors",
              st_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::string(8, '\0')));
  expect_error([&] { io::SafetensorsReader r((d / "tail.safetensors").string()); }, {"cover 4 bytes", "has 8"});
}
