// Labelled text for sequence classifiers: fortune categories, .jsonl with text/label, or a
// directory with one file per class; and SequenceDataset, the padded samples the loader batches.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "io/input_file.h"
#include "leantrain/data.h"
#include "leantrain/error.h"
#include "text/tokenizer.h"

namespace lt {

namespace fs = std::filesystem;

namespace {

struct Labelled {
  std::string text;
  int64_t label;
};

int64_t val_every(const TextOptions& opt) {
  LT_CHECK(opt.val_fraction > 0 && opt.val_fraction < 1, "validation fraction " + std::to_string(opt.val_fraction),
           "it must be in (0, 1)", "pass e.g. 0.1");
  return std::max<int64_t>(2, std::llround(1.0 / opt.val_fraction));
}

// Tokenizes every text, cuts it to max_len (keeping a trailing special token), and deals each
// class's every n-th text to validation.
TextClasses build(std::vector<std::string> classes, const std::vector<Labelled>& texts, const text::Tokenizer& tok,
                  int64_t max_len, const TextOptions& opt, const std::string& source) {
  LT_CHECK(max_len >= 1, "sequence length " + std::to_string(max_len), "a text needs at least one position",
           "pass --seq-len 1 or more");
  LT_CHECK(!texts.empty(), "no labelled texts in " + source, "every file was empty", "pass a non-empty data set");
  LT_CHECK(classes.size() >= 2, "one class in " + source, "a classifier needs at least two classes to tell apart",
           "add texts of another class");
  TextClasses out;
  out.classes = std::move(classes);
  const int64_t every = val_every(opt);
  const std::optional<int32_t> eos = tok.eos_id();
  std::vector<int64_t> seen(out.classes.size(), 0);
  for (const Labelled& t : texts) {
    std::vector<int32_t> ids = tok.encode(t.text, /*add_special=*/true);
    if (int64_t(ids.size()) > max_len) {
      const bool keep_last = eos && ids.back() == *eos && max_len >= 2;
      const int32_t last = ids.back();
      ids.resize(size_t(max_len));
      if (keep_last) ids.back() = last;
      ++out.truncated;
    }
    if (ids.empty()) continue;  // an empty text with a tokenizer that adds nothing
    const bool val = ++seen[size_t(t.label)] % every == 0;
    (val ? out.val : out.train).add(ids, t.label);
  }
  LT_CHECK(out.train.size() > 0 && out.val.size() > 0,
           std::to_string(texts.size()) + " labelled texts in " + source,
           "validation takes every " + std::to_string(every) + "th text of a class, and " +
               (out.val.size() == 0 ? "no class has that many" : "that left no training text"),
           "give each class at least " + std::to_string(every) + " texts");
  return out;
}

std::string read_text_file(const fs::path& p) {
  return io::read_input_file(p.string(), io::kMaxTextBytes, "as text", "pass a smaller file");
}

std::vector<fs::path> files_of(const fs::path& dir, bool fortunes) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name[0] == '.' || !e.is_regular_file()) continue;
    if (fortunes && (e.path().extension() == ".dat" || e.path().extension() == ".u8")) continue;
    out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TextClasses load_jsonl_classes(const fs::path& path, const text::Tokenizer& tok, int64_t max_len, const TextOptions& opt) {
  const std::string s = read_text_file(path);
  struct Line {
    std::string text;
    nlohmann::json label;
    int64_t line;
  };
  std::vector<Line> lines;
  bool any_int = false, any_string = false;
  int64_t n = 0;
  for (size_t pos = 0; pos < s.size();) {
    size_t end = s.find('\n', pos);
    if (end == std::string::npos) end = s.size();
    const std::string_view raw(s.data() + pos, end - pos);
    pos = end + 1;
    ++n;
    const std::string where = path.string() + ":" + std::to_string(n);
    const std::string fix = "write one JSON object per line with a string \"text\" and a \"label\" (an integer or a string)";
    if (raw.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    nlohmann::json j = nlohmann::json::parse(raw, nullptr, false);
    LT_CHECK(!j.is_discarded() && j.is_object(), where, "it is not a JSON object", fix);
    auto t = j.find("text");
    auto l = j.find("label");
    LT_CHECK(t != j.end() && t->is_string(), where, "it has no string \"text\" field", fix);
    LT_CHECK(l != j.end() && (l->is_number_integer() || l->is_string()), where,
             "its \"label\" is " + (l == j.end() ? std::string("missing") : l->dump()), fix);
    if (l->is_number_integer()) {
      LT_CHECK(l->get<int64_t>() >= 0 && l->get<int64_t>() < (int64_t(1) << 20), where,
               "label " + l->dump() + " is not a class id in [0, 2^20)", fix);
      any_int = true;
    } else {
      any_string = true;
    }
    LT_CHECK(!(any_int && any_string), where, "labels mix integers and strings",
             "label every line the same way: class ids 0..n-1, or class names");
    lines.push_back({t->get<std::string>(), *l, n});
  }
  std::vector<std::string> classes;
  std::map<std::string, int64_t> by_name;
  if (any_string) {
    for (const Line& l : lines) by_name.emplace(l.label.get<std::string>(), 0);
    for (auto& [name, id] : by_name) id = int64_t(classes.size()), classes.push_back(name);
  } else {
    int64_t top = -1;
    for (const Line& l : lines) top = std::max(top, l.label.get<int64_t>());
    for (int64_t i = 0; i <= top; ++i) classes.push_back(std::to_string(i));
  }
  std::vector<Labelled> texts;
  texts.reserve(lines.size());
  for (Line& l : lines)
    texts.push_back({std::move(l.text), any_string ? by_name[l.label.get<std::string>()] : l.label.get<int64_t>()});
  return build(std::move(classes), texts, tok, max_len, opt, path.string());
}

}  // namespace

void TextClasses::Split::add(std::span<const int32_t> text_ids, int64_t label) {
  ids.insert(ids.end(), text_ids.begin(), text_ids.end());
  offsets.push_back(int64_t(ids.size()));
  labels.push_back(label);
}

TextClasses load_fortune_classes(const text::Tokenizer& tok, int64_t max_len, const TextOptions& opt,
                                 const std::string& dir) {
  const std::string fix = "apt-get install fortunes, or pass a .jsonl file or a directory of one file per class";
  LT_CHECK(fs::is_directory(dir), "fortunes not found", "no directory " + dir, fix);
  std::vector<std::string> classes;
  std::vector<Labelled> texts;
  for (const fs::path& f : files_of(dir, /*fortunes=*/true)) {
    std::vector<std::string> entries = parse_fortunes(read_text_file(f));
    if (entries.empty()) continue;
    for (std::string& e : entries) texts.push_back({std::move(e), int64_t(classes.size())});
    classes.push_back(f.filename().string());
  }
  LT_CHECK(!classes.empty(), "fortunes not found", "no fortune files in " + dir, fix);
  return build(std::move(classes), texts, tok, max_len, opt, dir);
}

TextClasses load_text_classes(const std::string& path, const text::Tokenizer& tok, int64_t max_len,
                              const TextOptions& opt) {
  std::error_code ec;
  LT_CHECK(fs::exists(path, ec), "labelled text not found", "no file or directory " + path, "pass an existing path");
  if (!fs::is_directory(path, ec)) {
    LT_CHECK(fs::path(path).extension() == ".jsonl", "labelled text " + path,
             "a classifier reads a .jsonl file (text and label per line) or a directory of one text file per class",
             "pass one of those");
    return load_jsonl_classes(path, tok, max_len, opt);
  }
  std::vector<std::string> classes;
  std::vector<Labelled> texts;
  for (const fs::path& f : files_of(path, false)) {
    const std::string s = read_text_file(f);
    const int64_t label = int64_t(classes.size());
    size_t count = 0;
    for (size_t pos = 0; pos < s.size();) {
      size_t end = s.find('\n', pos);
      if (end == std::string::npos) end = s.size();
      std::string line = s.substr(pos, end - pos);
      pos = end + 1;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.find_first_not_of(" \t") == std::string::npos) continue;
      texts.push_back({std::move(line), label});
      ++count;
    }
    if (count) classes.push_back(f.stem().string());
  }
  return build(std::move(classes), texts, tok, max_len, opt, path);
}

SequenceDataset::SequenceDataset(std::shared_ptr<const TextClasses> data, bool validation, int64_t seq_len, int64_t pad_id)
    : data_(std::move(data)), validation_(validation), seq_len_(seq_len), pad_id_(pad_id) {
  const TextClasses::Split& s = split();
  for (size_t i = 0; i < s.ids.size(); ++i)
    LT_CHECK(s.ids[i] != pad_id, "a text holds token id " + std::to_string(pad_id),
             "that is the model's pad_token_id: it would be read as padding",
             "remove that character from the data, or use the model's own tokenizer");
  for (int64_t i = 0; i < s.size(); ++i)
    LT_CHECK(s.offsets[size_t(i) + 1] - s.offsets[size_t(i)] <= seq_len, "a text of " +
             std::to_string(s.offsets[size_t(i) + 1] - s.offsets[size_t(i)]) + " tokens",
             "the samples have " + std::to_string(seq_len) + " positions", "load the texts with that length");
}

void SequenceDataset::get(int64_t i, void* input, int64_t* target) const {
  const TextClasses::Split& s = split();
  int64_t* out = static_cast<int64_t*>(input);
  const int64_t b = s.offsets[size_t(i)], e = s.offsets[size_t(i) + 1];
  for (int64_t k = 0; k < seq_len_; ++k) out[k] = b + k < e ? s.ids[size_t(b + k)] : pad_id_;
  *target = s.labels[size_t(i)];
}

}  // namespace lt
