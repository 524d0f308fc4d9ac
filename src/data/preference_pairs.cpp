// Preference pairs for --objective dpo: .jsonl lines {"prompt", "chosen", "rejected"} tokenized
// as TRL's DPOTrainer.tokenize_row does, with two differences, both so that SFT-then-DPO reads
// the prompt exactly as the prompt/response SFT path does (data/corpus_builder.cpp): the prompt
// is encoded with the tokenizer's special tokens (BOS for LLaMA-style tokenizers; TRL encodes a
// string prompt without them), and a completion is followed by "\n" when the tokenizer has no EOS.
// Each pair becomes two rows of one fixed [2, T] sample (data.h, PairDataset), so a micro-batch
// of B pairs is one [2B, T] forward and every batch has the same shape (the plan stays exact).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <functional>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "data/jsonl_lines.h"
#include "io/input_file.h"
#include "leantrain/data.h"
#include "leantrain/error.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace lt {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFix =
    "write one JSON object per line with string \"prompt\", \"chosen\" and \"rejected\" fields (a preference pair)";

std::string quoted(const std::string& s) { return "\"" + s + "\""; }

struct RawPair {
  std::string prompt, chosen, rejected;
  std::string where;  // file:line
  bool chat = false;  // rendered by a chat template: no special tokens, no EOS added
};

using text::OrderedJson;

// A list of {"role": str, ...} messages, or an error naming the field.
void check_messages(const OrderedJson& v, const std::string& field, const std::function<void(const std::string&)>& bad) {
  if (!v.is_array() || v.empty()) bad("field " + quoted(field) + " is not a non-empty list of messages");
  for (size_t i = 0; i < v.size(); ++i)
    if (!v[i].is_object() || !v[i].contains("role") || !v[i]["role"].is_string())
      bad(field + "[" + std::to_string(i) + "] is not a message {\"role\": ..., \"content\": ...}");
}

// The longest common prefix of two strings.
std::string common_prefix(const std::string& a, const std::string& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return a.substr(0, n);
}

// A conversational pair rendered as TRL's maybe_extract_prompt + maybe_apply_chat_template do: an
// implicit prompt is the messages chosen and rejected share at their start; the prompt is rendered
// with the generation prompt, each completion as what prompt + completion's rendering adds to it
// (the three renderings' common prefix being the prompt, as TRL takes it).
void render_chat_pair(const OrderedJson& line, const PairOptions& o, RawPair& p,
                      const std::function<void(const std::string&)>& bad) {
  if (!o.chat_template)
    bad("its pair is a conversation (lists of messages), and this run has no chat template to render it");
  OrderedJson chosen = line.at(o.chosen_field), rejected = line.at(o.rejected_field), prompt = OrderedJson::array();
  check_messages(chosen, o.chosen_field, bad);
  check_messages(rejected, o.rejected_field, bad);
  if (line.contains(o.prompt_field)) {
    prompt = line.at(o.prompt_field);
    check_messages(prompt, o.prompt_field, bad);
  } else {
    size_t k = 0;
    while (k < chosen.size() && k < rejected.size() && chosen[k] == rejected[k]) ++k;
    if (k == 0) bad("it has no " + quoted(o.prompt_field) + " field and its two conversations share no first message");
    for (size_t i = 0; i < k; ++i) prompt.push_back(chosen[i]);
    chosen = OrderedJson(chosen.begin() + std::ptrdiff_t(k), chosen.end());
    rejected = OrderedJson(rejected.begin() + std::ptrdiff_t(k), rejected.end());
    if (chosen.empty() || rejected.empty()) bad("its two conversations are the same up to the end of one of them");
  }
  if (prompt.back()["role"] == "assistant")
    bad("its prompt ends with an assistant message, which the completion would continue (not read)");
  const text::ChatTemplate* tmpl_ptr = nullptr;
  try {
    tmpl_ptr = &o.chat_template();
  } catch (const Error& e) {
    bad("its pair is a conversation, and " + e.what_part() + " cannot render it: " + e.why());
  }
  const text::ChatTemplate& tmpl = *tmpl_ptr;
  auto render = [&](const OrderedJson& messages, bool gen) {
    text::ChatOptions co;
    co.add_generation_prompt = gen;
    try {
      return tmpl.render(messages, co);
    } catch (const Error& e) {
      bad("its chat template could not render it: " + e.why());
    }
    return std::string();
  };
  auto joined = [&](const OrderedJson& tail) {
    OrderedJson all = prompt;
    for (const auto& m : tail) all.push_back(m);
    return render(all, false);
  };
  const std::string pc = joined(chosen), pr = joined(rejected);
  p.prompt = common_prefix(common_prefix(render(prompt, true), pc), pr);
  p.chosen = pc.substr(p.prompt.size());
  p.rejected = pr.substr(p.prompt.size());
  if (p.chosen.empty() || p.rejected.empty())
    bad("a completion renders to nothing beyond its prompt");
  p.chat = true;
}

// The fields of one line, or an error naming file:line.
RawPair pair_of(std::string_view line, const std::string& where, const PairOptions& o) {
  auto bad = [&](const std::string& why, const char* fix = kFix) { fail(where, why, fix); };
  const nlohmann::json j = data::parse_jsonl_line(line, [&](const std::string& why) { bad(why); });
  if (!j.is_object()) bad(std::string("it is a JSON ") + j.type_name() + ", not an object");
  const bool has_c = j.contains(o.chosen_field), has_r = j.contains(o.rejected_field);
  if (!has_c && !has_r) {
    if (j.contains("text") || j.contains("response") || j.contains("messages"))
      bad("it has no " + quoted(o.chosen_field) + " and " + quoted(o.rejected_field) +
              " fields: it is SFT data, and --objective dpo trains on preference pairs",
          "pass pairs {\"prompt\", \"chosen\", \"rejected\"} (--chosen-field / --rejected-field rename them), or drop "
          "--objective dpo to train on this file");
    bad("it has no " + quoted(o.chosen_field) + " and no " + quoted(o.rejected_field) + " field");
  }
  RawPair p;
  p.where = where;
  if (j.contains(o.chosen_field) && j.contains(o.rejected_field) && j[o.chosen_field].is_array() &&
      j[o.rejected_field].is_array()) {
    // Re-read with the keys in file order: a template may iterate a message's keys.
    render_chat_pair(OrderedJson::parse(line), o, p, [&](const std::string& why) { bad(why); });
    return p;
  }
  auto text = [&](const std::string& name, std::string& out, bool allow_empty) {
    auto it = j.find(name);
    if (it == j.end()) bad("it has no " + quoted(name) + " field");
    if (it->is_array())
      bad("field " + quoted(name) + " is a list of messages and another field of the pair is not",
          "write all of a pair's fields as strings, or chosen and rejected (and the prompt, if given) as lists of messages");
    if (!it->is_string()) bad("field " + quoted(name) + " is " + std::string(it->type_name()) + ", not a string");
    out = it->get<std::string>();
    if (!allow_empty && out.empty())
      bad("field " + quoted(name) + " is empty, and a completion needs at least one token of its own",
          "drop the pair, or write its completion");
  };
  text(o.prompt_field, p.prompt, true);
  text(o.chosen_field, p.chosen, false);
  text(o.rejected_field, p.rejected, false);
  return p;
}

void parse_pairs(const std::string& text, const std::string& path, const PairOptions& o, std::vector<RawPair>& out) {
  data::for_each_jsonl_line(text, [&](std::string_view line, int64_t line_no) {
    out.push_back(pair_of(line, path + ":" + std::to_string(line_no), o));
  });
}

struct Encoded {
  std::vector<int32_t> prompt, chosen, rejected;
  bool truncated = false;
};

class PairEncoder {
 public:
  PairEncoder(const text::Tokenizer& tok, const PairOptions& o) : tok_(tok), o_(o), eos_(tok.eos_id()) {
    if (eos_) {
      const std::vector<int32_t> empty = tok.encode("", true);
      post_adds_eos_ = !empty.empty() && empty.back() == *eos_;
    }
  }

  Encoded encode(const RawPair& p) const {
    Encoded e;
    e.prompt = tok_.encode(p.prompt, !p.chat);  // a chat template writes BOS itself where the model wants it
    if (!p.chat && post_adds_eos_ && !e.prompt.empty() && e.prompt.back() == *eos_) e.prompt.pop_back();  // EOS ends a completion
    // A row holds seq_len + 1 tokens (inputs 0..T-1, targets 1..T); the first target is the
    // token after the first input, so an empty prompt leaves the completion's first token untrained.
    const int64_t room = o_.seq_len + 1 - int64_t(e.prompt.size());
    if (room < 1 || (e.prompt.empty() && room < 2))
      fail(p.where, "its prompt is " + std::to_string(e.prompt.size()) + " tokens, and --seq-len " +
                        std::to_string(o_.seq_len) + " leaves no room for its completions",
           "pass a larger --seq-len, or shorten the prompt");
    e.chosen = completion(p, p.chosen, room, e.truncated);
    e.rejected = completion(p, p.rejected, room, e.truncated);
    return e;
  }

 private:
  // A completion's ids, then EOS (or "\n" without one); a rendered turn already ends itself.
  std::vector<int32_t> completion(const RawPair& p, const std::string& text, int64_t room, bool& truncated) const {
    std::vector<int32_t> ids = tok_.encode(eos_ || p.chat ? text : text + "\n", false);
    if (eos_ && !p.chat) ids.push_back(*eos_);
    if (ids.empty()) fail(p.where, "a completion encodes to no token", "drop the pair, or write its completion");
    if (int64_t(ids.size()) > room) {
      ids.resize(size_t(room));
      truncated = true;
    }
    return ids;
  }

  const text::Tokenizer& tok_;
  const PairOptions& o_;
  std::optional<int32_t> eos_;
  bool post_adds_eos_ = false;
};

}  // namespace

void PreferencePairs::Split::add(std::span<const int32_t> prompt, std::span<const int32_t> chosen,
                                 std::span<const int32_t> rejected) {
  for (std::span<const int32_t> part : {prompt, chosen, rejected}) {
    ids.insert(ids.end(), part.begin(), part.end());
    offsets.push_back(int64_t(ids.size()));
  }
}

PreferencePairs load_preference_pairs(const std::string& path, const text::Tokenizer& tok, const PairOptions& o) {
  LT_CHECK(o.val_fraction >= 0 && o.val_fraction < 1, "validation fraction " + std::to_string(o.val_fraction),
           "it is the share of the pairs held out", "use a value in [0, 1)");
  std::error_code ec;
  LT_CHECK(fs::exists(path, ec), "preference pairs not found", "no file or directory " + path,
           "pass a .jsonl file of {\"prompt\", \"chosen\", \"rejected\"} lines");
  std::vector<fs::path> files;
  if (fs::is_directory(path, ec)) {
    for (const auto& e : fs::directory_iterator(path)) {
      const std::string name = e.path().filename().string();
      if (!name.empty() && name[0] != '.' && e.is_regular_file() && e.path().extension() == ".jsonl")
        files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    LT_CHECK(!files.empty(), "--data " + path + " holds no .jsonl file", "--objective dpo reads preference pairs from .jsonl lines",
             "pass a .jsonl file of {\"prompt\", \"chosen\", \"rejected\"} lines, or a directory of them");
  } else {
    files.push_back(path);
    if (fs::path(path).extension() != ".jsonl")
      fail("--data " + path + " is not a .jsonl file", "--objective dpo reads preference pairs from .jsonl lines",
           "pass a .jsonl file of {\"prompt\", \"chosen\", \"rejected\"} lines");
  }
  std::vector<RawPair> raw;
  int64_t total = 0;
  for (const fs::path& f : files) {
    io::InputFile in(f.string());
    std::string text = in.read_all(io::kMaxTextBytes - total, "as preference pairs (all files together)",
                                   "pass a smaller file, or fewer files");
    total += int64_t(text.size());
    parse_pairs(text, f.string(), o, raw);
  }
  LT_CHECK(!raw.empty(), "no preference pairs in " + path, "every line is blank", kFix);

  // Pairs are claimed one at a time by the threads and placed in order afterwards.
  PairEncoder enc(tok, o);
  std::vector<Encoded> out(raw.size());
  std::vector<std::exception_ptr> errors(raw.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < raw.size();) {
      try {
        out[i] = enc.encode(raw[i]);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  const size_t threads = std::min<size_t>(size_t(std::max(1, o.workers)), raw.size());
  if (threads <= 1) {
    work();
  } else {
    std::vector<std::jthread> pool;
    for (size_t t = 0; t < threads; ++t) pool.emplace_back(work);
  }
  PreferencePairs pairs;
  const int64_t period = o.val_fraction > 0 ? std::max<int64_t>(2, std::llround(1.0 / o.val_fraction)) : 0;
  for (size_t i = 0; i < raw.size(); ++i) {
    if (errors[i]) std::rethrow_exception(errors[i]);  // the first pair's error, for any thread count
    const bool val = period && int64_t(i) % period == period - 1;
    (val ? pairs.val : pairs.train).add(out[i].prompt, out[i].chosen, out[i].rejected);
    pairs.truncated += out[i].truncated;
  }
  return pairs;
}

PairDataset::PairDataset(std::shared_ptr<const PreferencePairs> data, bool validation, int64_t seq_len, int64_t pad_id)
    : data_(std::move(data)), validation_(validation), seq_len_(seq_len), pad_id_(pad_id) {
  LT_CHECK(seq_len_ > 0, "pair dataset with seq_len " + std::to_string(seq_len), "a row needs a context", "pass --seq-len 1 or more");
}

void PairDataset::get(int64_t i, void* input, int64_t* target) const {
  const PreferencePairs::Split& s = split();
  const int64_t T = seq_len_;
  auto* in = static_cast<int64_t*>(input);
  const int64_t* o = s.offsets.data() + 3 * i;
  const int64_t np = o[1] - o[0];
  for (int k = 0; k < 2; ++k) {
    const int64_t c0 = o[1 + k], nc = o[2 + k] - c0;
    int64_t* row = in + k * T;
    int64_t* tgt = target + k * T;
    // Token j of the row: the prompt's, then the completion's (at most T + 1 of them in all).
    auto token = [&](int64_t j) -> int64_t { return j < np ? s.ids[size_t(o[0] + j)] : s.ids[size_t(c0 + j - np)]; };
    const int64_t n = np + nc;
    for (int64_t t = 0; t < T; ++t) {
      row[t] = t < n ? token(t) : pad_id_;
      tgt[t] = t + 1 < n && t + 1 >= np ? token(t + 1) : -100;  // the completion's tokens only
    }
  }
}

int64_t PairDataset::targets_of(int64_t i, int k) const {
  const int64_t* o = split().offsets.data() + 3 * i;
  const int64_t np = o[1] - o[0], nc = o[2 + k] - o[1 + k];
  return np > 0 ? nc : nc - 1;  // with no prompt the first completion token is no target
}

void PairDataset::get_aux(int64_t i, float* aux) const {
  aux[0] = reference_.empty() ? 0.f : reference_[size_t(2 * i)];
  aux[1] = reference_.empty() ? 0.f : reference_[size_t(2 * i + 1)];
  aux[2] = float(targets_of(i, 0));
  aux[3] = float(targets_of(i, 1));
}

void PairDataset::set_reference(std::vector<float> logps) {
  LT_CHECK(int64_t(logps.size()) == 2 * size(),
           "reference log-probabilities for " + std::to_string(logps.size() / 2) + " pairs",
           "the split has " + std::to_string(size()), "compute them on this data");
  reference_ = std::move(logps);
}

}  // namespace lt
