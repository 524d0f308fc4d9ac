// Text corpora from files: fortune files (each entry a document), text files (each file one) and
// JSON lines (each line one), tokenized by data::CorpusBuilder. Fortune files are split into
// entries so that validation samples every file.
#include <algorithm>
#include <cmath>
#include <filesystem>

#include "data/corpus_builder.h"
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

// JSON lines are handed to the tokenizer in batches of about this much text (memory stays a
// small multiple of the batch, and each batch keeps the threads busy).
constexpr size_t kJsonlBatchBytes = size_t(8) << 20;

bool is_jsonl(const fs::path& p) { return p.extension() == ".jsonl"; }

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

TokenCorpus load_fortunes(const text::Tokenizer& tok, const TextOptions& opt, const std::string& dir) {
  data::CorpusBuilder builder(tok, opt);
  const std::string fix = "apt-get install fortunes, or pass a text file or directory";
  LT_CHECK(fs::is_directory(dir), "fortunes not found", "no directory " + dir, fix);
  auto files = list_files(dir, [](const fs::path& p) { return p.extension() == ".dat" || p.extension() == ".u8"; });
  LT_CHECK(!files.empty(), "fortunes not found", "no fortune files in " + dir, fix);
  CorpusReader reader(dir);
  for (const auto& f : files) {
    std::vector<data::Document> docs;
    for (std::string& e : parse_fortunes(reader.read(f))) docs.emplace_back(std::move(e));
    builder.add(std::move(docs), data::Placement::Whole, "%\n");
  }
  TokenCorpus c = builder.finish();
  LT_CHECK(!c.train.empty(), "no fortunes in " + dir, "every file was empty", fix);
  return c;
}

TokenCorpus load_text(const std::string& path, const text::Tokenizer& tok, const TextOptions& opt) {
  data::CorpusBuilder builder(tok, opt);
  LT_CHECK(fs::exists(path), "text not found", "no file or directory " + path, "pass an existing path");
  std::vector<fs::path> files;
  if (fs::is_directory(path)) files = list_files(path, [](const fs::path&) { return false; });
  else files.push_back(path);
  CorpusReader reader(path);
  for (const auto& f : files) {
    std::string s = reader.read(f);
    if (is_jsonl(f)) {
      data::parse_jsonl(s, f.string(), opt, kJsonlBatchBytes, [&](std::vector<data::Document> docs) {
        builder.add(std::move(docs), data::Placement::Whole, "\n");
      });
      continue;
    }
    std::vector<data::Document> one;
    one.emplace_back(std::move(s));
    builder.add(std::move(one), data::Placement::Tail, "");
  }
  TokenCorpus c = builder.finish();
  LT_CHECK(!c.train.empty(), "no text in " + path, "the file(s) are empty", "pass a non-empty text file or directory");
  return c;
}

}  // namespace lt
