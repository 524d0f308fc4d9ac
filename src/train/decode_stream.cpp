#include "train/decode_stream.h"

namespace lt {

namespace {
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD in UTF-8
}  // namespace

DecodeStream::DecodeStream(const text::Tokenizer& tok, std::vector<int32_t> prompt)
    : tok_(tok), ids_(std::move(prompt)), read_(ids_.size()) {}

std::string DecodeStream::next(bool final) {
  const std::span<const int32_t> all(ids_);
  const std::string before = tok_.decode(all.first(read_), true);
  std::string text = tok_.decode(all, true);
  if (!final && text.ends_with(kReplacement)) return "";
  // Decoders extend their text as ids are added; should one rewrite earlier text, what was
  // handed out stays and only the text beyond its length follows.
  if (text.size() <= before.size()) return "";
  ids_.erase(ids_.begin(), ids_.begin() + int64_t(read_));  // the next window starts here
  read_ = ids_.size();
  return text.substr(before.size());
}

std::string DecodeStream::push(int32_t id) {
  ids_.push_back(id);
  return next(false);
}

std::string DecodeStream::finish() { return next(true); }

}  // namespace lt
