// The sample sources: normalised images with class labels, next-token text windows, and rows of
// whole documents (padded one per row, or packed several per row).
#include <algorithm>
#include <limits>
#include <map>

#include "leantrain/data.h"
#include "leantrain/error.h"

namespace lt {

ImageDataset::ImageDataset(std::shared_ptr<const ImageSet> set, float mean, float std)
    : set_(std::move(set)), mean_(mean), std_(std) {
  LT_CHECK(std > 0, "image std " + std::to_string(std) + " is not positive", "images are divided by it",
           "pass the dataset's standard deviation");
}

void ImageDataset::get(int64_t i, void* input, int64_t* target) const {
  const int64_t n = set_->rows * set_->cols;
  const uint8_t* px = set_->pixels.data() + i * n;
  float* out = static_cast<float*>(input);
  for (int64_t j = 0; j < n; ++j) out[j] = (float(px[j]) / 255.0f - mean_) / std_;
  *target = set_->labels[size_t(i)];
}

TokenWindows::TokenWindows(std::shared_ptr<const TokenStream> tokens, int64_t seq_len, int64_t stride)
    : tokens_(std::move(tokens)), seq_len_(seq_len), stride_(stride > 0 ? stride : seq_len) {
  LT_CHECK(seq_len > 0, "sequence length " + std::to_string(seq_len) + " is not positive", "windows need a length",
           "pass a positive sequence length");
  const int64_t n = int64_t(tokens_->size());
  LT_CHECK(n >= seq_len + 1, "the text has " + std::to_string(n) + " tokens",
           "one window of " + std::to_string(seq_len) + " tokens plus its next-token target needs " +
               std::to_string(seq_len + 1),
           "use more text or a shorter sequence length");
  count_ = (n - seq_len - 1) / stride_ + 1;
}

void TokenWindows::get(int64_t i, void* input, int64_t* target) const {
  const int64_t start = i * stride_;
  tokens_->read(start, seq_len_, static_cast<int64_t*>(input));
  tokens_->read(start + 1, seq_len_, target);
  if (!tokens_->any_masked()) return;
  for (int64_t j = 0; j < seq_len_; ++j)
    if (!tokens_->is_target(start + 1 + j)) target[j] = kIgnoreTarget;
}

DocumentRows::DocumentRows(std::shared_ptr<const TokenStream> tokens, int64_t seq_len, Packing packing, int32_t pad_id)
    : tokens_(std::move(tokens)), seq_len_(seq_len), packing_(packing), pad_id_(pad_id) {
  LT_CHECK(seq_len > 0 && seq_len <= std::numeric_limits<int32_t>::max(),
           "sequence length " + std::to_string(seq_len) + " is out of range", "rows hold 1 to 2^31 - 1 tokens",
           "pass a positive sequence length");
  LT_CHECK(packing != Packing::Concat, "DocumentRows with packing concat", "concatenated text is cut by TokenWindows",
           "use TokenWindows");
  const std::vector<int64_t> starts = tokens_->document_starts();
  const int64_t n_tokens = tokens_->size(), T = seq_len_;
  std::vector<std::vector<Segment>> rows;
  std::vector<Segment> rest;  // documents (or their last pieces) shorter than a row
  for (size_t d = 0; d < starts.size(); ++d) {
    const int64_t s = starts[d], e = d + 1 < starts.size() ? starts[d + 1] : n_tokens;
    int64_t inputs = e - s - 1;  // the last token is only a target
    if (inputs < 1) continue;
    ++documents_;
    int64_t p = s;
    for (; inputs > T; p += T, inputs -= T) rows.push_back({Segment{p, int32_t(T)}});
    rest.push_back(Segment{p, int32_t(inputs)});
  }
  if (packing_ == Packing::None) {
    for (const Segment& g : rest) rows.push_back({g});
  } else {
    // Best-fit decreasing: the longest first (stream order among equals), each into the row with
    // the least room that still holds it (the oldest such row), else a new row.
    std::stable_sort(rest.begin(), rest.end(), [](const Segment& a, const Segment& b) { return a.len > b.len; });
    std::multimap<int64_t, size_t> room;  // free positions -> row
    for (const Segment& g : rest) {
      auto it = room.lower_bound(g.len);
      size_t r;
      int64_t left;
      if (it == room.end()) {
        r = rows.size();
        rows.emplace_back();
        left = T;
      } else {
        r = it->second;
        left = it->first;
        room.erase(it);
      }
      rows[r].push_back(g);
      if (left - g.len > 0) room.emplace(left - g.len, r);
    }
  }
  row_begin_.reserve(rows.size() + 1);
  row_begin_.push_back(0);
  for (auto& r : rows) {
    for (const Segment& g : r) {
      segments_.push_back(g);
      text_tokens_ += g.len;
    }
    row_begin_.push_back(int64_t(segments_.size()));
  }
}

void DocumentRows::get(int64_t i, void* input_v, int64_t* target) const {
  auto* input = static_cast<int64_t*>(input_v);
  int64_t at = 0;
  for (int64_t k = row_begin_[size_t(i)]; k < row_begin_[size_t(i) + 1]; ++k) {
    const Segment& g = segments_[size_t(k)];
    tokens_->read(g.begin, g.len, input + at);
    tokens_->read(g.begin + 1, g.len, target + at);
    if (tokens_->any_masked())
      for (int64_t j = 0; j < g.len; ++j)
        if (!tokens_->is_target(g.begin + 1 + j)) target[at + j] = kIgnoreTarget;
    at += g.len;
  }
  for (; at < seq_len_; ++at) input[at] = pad_id_, target[at] = kIgnoreTarget;
}

void DocumentRows::get_doc_pos(int64_t i, int32_t* out) const {
  int64_t at = 0;
  for (int64_t k = row_begin_[size_t(i)]; k < row_begin_[size_t(i) + 1]; ++k)
    for (int32_t j = 0; j < segments_[size_t(k)].len; ++j) out[at++] = j;
  for (int32_t j = 0; at < seq_len_; ++j) out[at++] = j;  // the padding: a document of its own
}

int64_t DocumentRows::real_tokens(int64_t i) const {
  int64_t n = 0;
  for (int64_t k = row_begin_[size_t(i)]; k < row_begin_[size_t(i) + 1]; ++k) n += segments_[size_t(k)].len;
  return n;
}

}  // namespace lt
