// Text corpora read with the byte tokenizer (one byte a token, as before tokenizers): fortune
// parsing of a crafted file, directory rules, splits, missing package. Tokenized corpora and
// JSON lines: test_data_tokens.cpp.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "leantrain/data.h"
#include "leantrain/error.h"
#include "text/tokenizer.h"

using namespace lt;
namespace fs = std::filesystem;

namespace {
fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("lt_test_data_text_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}
void write(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }
// The byte tokenizer's tokens as text.
std::string str(const TokenStream& t) {
  std::string s;
  for (int32_t id : t.ids()) s.push_back(char(id));
  return s;
}
const text::Tokenizer& bytes() {
  static const auto tok = text::byte_tokenizer();
  return *tok;
}
TextOptions val(double fraction) {
  TextOptions o;
  o.val_fraction = fraction;
  return o;
}
TokenCorpus load_fortunes(const std::string& dir, double fraction = 0.1) { return lt::load_fortunes(bytes(), val(fraction), dir); }
TokenCorpus load_fortunes() { return lt::load_fortunes(bytes()); }
TokenCorpus load_text(const std::string& path, double fraction = 0.1) { return lt::load_text(path, bytes(), val(fraction)); }
}  // namespace

TEST(DataText, ParseFortunes) {
  auto e = parse_fortunes("First one.\n%\nSecond\n  -- line two\n%\n%\n \n%\r\nLast, no closing %");
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0], "First one.\n");
  EXPECT_EQ(e[1], "Second\n  -- line two\n");
  EXPECT_EQ(e[2], "Last, no closing %\n");
  EXPECT_TRUE(parse_fortunes("%\n%\n").empty());
  // "%" inside a line is text.
  EXPECT_EQ(parse_fortunes("100% sure\n%\n")[0], "100% sure\n");
}

TEST(DataText, FortunesDirectoryRulesAndSplit) {
  fs::path d = temp_dir("fortunes");
  write(d / "a", "a0\n%\na1\n%\na2\n%\n");
  write(d / "b", "b0\n%\nb1\n%\n");
  write(d / "a.dat", "binary index: skipped");
  write(d / ".hidden", "skipped\n%\n");
  fs::create_symlink(d / "a", d / "a.u8");  // Debian's UTF-8 aliases: skipped
  fs::create_directories(d / "off");
  write(d / "off" / "c", "subdirectory: skipped\n%\n");
  TokenCorpus c = load_fortunes(d.string(), 0.2);  // every 5th entry to validation
  EXPECT_EQ(str(c.train), "a0\n%\na1\n%\na2\n%\nb0\n%\n");
  EXPECT_EQ(str(c.val), "b1\n%\n");
  TokenCorpus all = load_fortunes(d.string(), 0.0);
  EXPECT_TRUE(all.val.empty());
  EXPECT_EQ(all.train.size(), c.train.size() + c.val.size());
  fs::remove_all(d);
}

TEST(DataText, MissingFortunesNamesThePackage) {
  fs::path d = temp_dir("nofortunes");
  for (const std::string& dir : {(d / "nowhere").string(), d.string()}) {
    try {
      load_fortunes(dir);
      FAIL() << "no error for " << dir;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("apt-get install fortunes"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(load_fortunes(d.string(), 1.5), Error);
  fs::remove_all(d);
}

TEST(DataText, PlainTextFileAndDirectory) {
  fs::path d = temp_dir("plain");
  write(d / "one.txt", "0123456789");
  write(d / "two.txt", "abcdefghij");
  TokenCorpus f = load_text((d / "one.txt").string(), 0.3);
  EXPECT_EQ(str(f.train), "0123456");
  EXPECT_EQ(str(f.val), "789");
  TokenCorpus all = load_text(d.string(), 0.2);  // the tail of each file
  EXPECT_EQ(str(all.train), "01234567abcdefgh");
  EXPECT_EQ(str(all.val), "89ij");
  EXPECT_THROW(load_text((d / "none.txt").string()), Error);
  fs::remove_all(d);
}

TEST(DataText, InstalledFortunes) {
  if (!fs::exists(std::string(kFortunesDir) + "/fortunes")) GTEST_SKIP() << "fortunes is not installed";
  TokenCorpus c = load_fortunes();
  EXPECT_GT(c.train.size(), 100000);
  EXPECT_GT(c.val.size(), c.train.size() / 20);
  EXPECT_LT(c.val.size(), c.train.size() / 5);
}

TEST(DataText, SpecialAndHugeFilesAreRefused) {
  fs::path d = temp_dir("special");
  ASSERT_EQ(::mkfifo((d / "fifo.txt").c_str(), 0600), 0);
  auto error_of = [](auto f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error_of([&] { load_text((d / "fifo.txt").string()); }).find("it is a FIFO"), std::string::npos);
  EXPECT_NE(error_of([&] { load_text("/dev/zero"); }).find("'/dev/zero': it is a character device"), std::string::npos);
  // A directory skips the FIFO and reads its regular files.
  write(d / "a.txt", "some text to train on\n");
  EXPECT_EQ(str(load_text(d.string(), 0.0).train), "some text to train on\n");
  // A sparse 5 GiB file: refused by its size, before any of it is read.
  fs::path big = d / "big" / "big.txt";
  fs::create_directories(big.parent_path());
  write(big, "");
  fs::resize_file(big, uintmax_t(5) << 30);
  std::string e = error_of([&] { load_text(big.string()); });
  EXPECT_NE(e.find("is too large: it holds more than 4 GiB, the most leantrain reads as text"), std::string::npos) << e;
  fs::remove_all(d);
}
