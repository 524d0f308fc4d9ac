// TokenStream: ids packed at the width their vocabulary needs, and the loss-target flags.
#include <cstring>

#include "leantrain/data.h"
#include "leantrain/error.h"

namespace lt {

namespace {
int width_for(int64_t vocab_size) {
  LT_CHECK(vocab_size > 0 && vocab_size <= (int64_t(1) << 31), "a vocabulary of " + std::to_string(vocab_size) + " ids",
           "token ids are stored as 32-bit integers", "use a tokenizer with 1 to 2^31 ids");
  return vocab_size <= 256 ? 1 : vocab_size <= 65536 ? 2 : 4;
}
}  // namespace

TokenStream::TokenStream(int64_t vocab_size) : width_(width_for(vocab_size)), vocab_(vocab_size) {}

void TokenStream::start_document() {
  if (!starts_.empty() && starts_.back() == size_) return;  // an empty document: nothing to start
  starts_.push_back(size_);
}

std::vector<int64_t> TokenStream::document_starts() const {
  std::vector<int64_t> out;
  if (starts_.empty() || starts_.front() != 0) out.push_back(0);
  for (int64_t s : starts_)
    if (s < size_) out.push_back(s);  // a start marked after the last token begins nothing
  return out;
}

void TokenStream::mark(int64_t n, bool target) {
  if (target && not_target_.empty()) return;  // every token so far is a target: no flags kept
  if (not_target_.empty()) not_target_.assign(size_t(size_ - n), 0);
  not_target_.resize(size_t(size_), target ? 0 : 1);
}

void TokenStream::append(std::span<const int32_t> ids, bool target) {
  const size_t at = data_.size();
  data_.resize(at + ids.size() * size_t(width_));
  uint8_t* out = data_.data() + at;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_) {
      data_.resize(at);
      fail("token id " + std::to_string(id), "the vocabulary has " + std::to_string(vocab_) + " ids",
           "the tokenizer produced an id outside its vocabulary; report it");
    }
    for (int b = 0; b < width_; ++b) *out++ = uint8_t(uint32_t(id) >> (8 * b));
  }
  size_ += int64_t(ids.size());
  mark(int64_t(ids.size()), target);
}

void TokenStream::append(std::span<const int32_t> ids, std::span<const uint8_t> targets) {
  LT_ASSERT(ids.size() == targets.size());
  size_t i = 0;
  while (i < ids.size()) {  // runs of one flag
    size_t j = i + 1;
    while (j < ids.size() && (targets[j] != 0) == (targets[i] != 0)) ++j;
    append(ids.subspan(i, j - i), targets[i] != 0);
    i = j;
  }
}

void TokenStream::append_bytes(std::string_view bytes, bool target) {
  LT_ASSERT(width_ == 1);
  data_.insert(data_.end(), bytes.begin(), bytes.end());
  size_ += int64_t(bytes.size());
  mark(int64_t(bytes.size()), target);
}

void TokenStream::append(const TokenStream& other, int64_t begin, int64_t end) {
  LT_ASSERT(other.width_ == width_ && 0 <= begin && begin <= end && end <= other.size_);
  data_.insert(data_.end(), other.data_.begin() + begin * width_, other.data_.begin() + end * width_);
  const int64_t n = end - begin;
  size_ += n;
  if (other.any_masked() && not_target_.empty()) not_target_.assign(size_t(size_ - n), 0);
  if (not_target_.empty()) return;
  not_target_.resize(size_t(size_), 0);
  if (other.any_masked())
    std::memcpy(not_target_.data() + (size_ - n), other.not_target_.data() + begin, size_t(n));
}

int32_t TokenStream::operator[](int64_t i) const {
  const uint8_t* p = data_.data() + i * width_;
  uint32_t v = 0;
  for (int b = 0; b < width_; ++b) v |= uint32_t(p[b]) << (8 * b);
  return int32_t(v);
}

void TokenStream::read(int64_t begin, int64_t n, int64_t* out) const {
  const uint8_t* p = data_.data() + begin * width_;
  switch (width_) {  // one loop per width: the byte case is as fast as reading bytes was
    case 1:
      for (int64_t j = 0; j < n; ++j) out[j] = p[j];
      break;
    case 2:
      for (int64_t j = 0; j < n; ++j) out[j] = int64_t(p[2 * j]) | int64_t(p[2 * j + 1]) << 8;
      break;
    default:
      for (int64_t j = 0; j < n; ++j) out[j] = (*this)[begin + j];
  }
}

std::vector<int32_t> TokenStream::ids() const {
  std::vector<int32_t> out(static_cast<size_t>(size_));
  for (int64_t i = 0; i < size_; ++i) out[size_t(i)] = (*this)[i];
  return out;
}

}  // namespace lt
