// Byte-level text corpora: each byte is a token id 0..255, so no tokenizer is needed and any
// file works. Fortune files are split into entries so that validation samples every file.
#include <algorithm>
#include <cmath>
#include <filesystem>

#include "io/input_file.h"
#include "leantrain/data.h"
#include "leantrain/error.h"

namespace lt {

namespace fs = std::filesystem;

namespace {

// Reads the files of one corpus whole: each must be a regular file (a FIFO or /dev/zero would
// never end), and all of them together at most io::kMaxTextBytes.
class CorpusReader {
 public:
  explicit CorpusReader(std::string source) : source_(std::move(source)) {}
  std::string read(const fs::path& p) {
    io::InputFile f(p.string());
    if (f.size() > io::kMaxTextBytes - total_) too_large();
    std::string s = f.read_all(io::kMaxTextBytes - total_, "as text (a corpus, all its files together)", kFix);
    total_ += int64_t(s.size());
    return s;
  }

 private:
  [[noreturn]] void too_large() const {
    fail("text in '" + source_ + "' is too large",
         "it holds more than " + io::limit_str(io::kMaxTextBytes) + ", the most leantrain reads as text",
         kFix);
  }
  static constexpr const char* kFix = "pass a smaller file, or fewer files";
  std::string source_;
  int64_t total_ = 0;
};

// Regular files of `dir` in name order, without hidden files (and `skip` says what else to drop).
template <class Skip> std::vector<fs::path> list_files(const fs::path& dir, Skip skip) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name[0] == '.' || e.is_directory() || !e.is_regular_file() || skip(e.path())) continue;
    out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

void check_fraction(double f) {
  LT_CHECK(f >= 0 && f < 1, "validation fraction " + std::to_string(f) + " is out of range",
           "it is the share of the text held out", "use a value in [0, 1), e.g. 0.1");
}

void append(std::vector<uint8_t>& dst, const std::string& s) { dst.insert(dst.end(), s.begin(), s.end()); }

}  // namespace

std::vector<std::string> parse_fortunes(const std::string& text) {
  std::vector<std::string> entries;
  std::string cur;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    size_t next = end == std::string::npos ? text.size() : end + 1;
    std::string_view line(text.data() + pos, (end == std::string::npos ? text.size() : end) - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line == "%") {
      if (!cur.empty()) entries.push_back(std::move(cur));
      cur.clear();
    } else {
      cur.append(text, pos, next - pos);
      if (end == std::string::npos) cur.push_back('\n');  // last line without newline
    }
    pos = next;
  }
  if (!cur.empty()) entries.push_back(std::move(cur));  // a last entry without a closing "%" line
  // Whitespace-only entries (blank lines between "%" lines) carry no text.
  entries.erase(std::remove_if(entries.begin(), entries.end(),
                               [](const std::string& e) { return e.find_first_not_of(" \t\r\n") == std::string::npos; }),
                entries.end());
  return entries;
}

TextCorpus load_fortunes(const std::string& dir, double val_fraction) {
  check_fraction(val_fraction);
  const std::string fix = "apt-get install fortunes, or pass a text file or directory";
  LT_CHECK(fs::is_directory(dir), "fortunes not found", "no directory " + dir, fix);
  auto files = list_files(dir, [](const fs::path& p) { return p.extension() == ".dat" || p.extension() == ".u8"; });
  LT_CHECK(!files.empty(), "fortunes not found", "no fortune files in " + dir, fix);
  const int64_t period = val_fraction > 0 ? std::max<int64_t>(2, std::llround(1.0 / val_fraction)) : 0;
  TextCorpus c;
  int64_t k = 0;
  CorpusReader reader(dir);
  for (const auto& f : files) {
    for (const std::string& e : parse_fortunes(reader.read(f))) {
      auto& dst = period && k % period == period - 1 ? c.val : c.train;
      append(dst, e);
      append(dst, "%\n");
      ++k;
    }
  }
  LT_CHECK(!c.train.empty(), "no fortunes in " + dir, "every file was empty", fix);
  return c;
}

TextCorpus load_text(const std::string& path, double val_fraction) {
  check_fraction(val_fraction);
  LT_CHECK(fs::exists(path), "text not found", "no file or directory " + path, "pass an existing path");
  std::vector<fs::path> files;
  if (fs::is_directory(path)) files = list_files(path, [](const fs::path&) { return false; });
  else files.push_back(path);
  TextCorpus c;
  CorpusReader reader(path);
  for (const auto& f : files) {
    std::string s = reader.read(f);
    size_t cut = s.size() - size_t(std::floor(double(s.size()) * val_fraction));
    c.train.insert(c.train.end(), s.begin(), s.begin() + int64_t(cut));
    c.val.insert(c.val.end(), s.begin() + int64_t(cut), s.end());
  }
  LT_CHECK(!c.train.empty(), "no text in " + path, "the file(s) are empty", "pass a non-empty text file or directory");
  return c;
}

}  // namespace lt
