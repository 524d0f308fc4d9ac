// The text of sampled ids as it grows, handed out piece by piece for `generate` to print.
// Decoding ids one at a time would break a character whose bytes span several tokens (byte
// fallback, byte-level BPE) and drop SentencePiece's "▁" spaces (a decoder strips the first
// one). Instead each step decodes a short window twice, from the last point handed out back to
// the one before it, without and with the new ids, and hands out the difference: the window's
// first token is treated alike in both. A decode ending in U+FFFD (a character not complete yet)
// is held back until the next token completes it, or finish().
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "text/tokenizer.h"

namespace lt {

class DecodeStream {
 public:
  // `prompt`: the ids before the first sampled one; their text is not handed out.
  DecodeStream(const text::Tokenizer& tok, std::vector<int32_t> prompt);
  std::string push(int32_t id);  // the new text (may be empty)
  std::string finish();          // the text held back, if any

 private:
  std::string next(bool final);
  const text::Tokenizer& tok_;
  std::vector<int32_t> ids_;   // from the window's start
  size_t read_ = 0;            // ids_[0, read_) are handed out
};

}  // namespace lt
