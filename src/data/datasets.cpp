// The two sample sources: normalised images with class labels, and next-token text windows.
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

}  // namespace lt
