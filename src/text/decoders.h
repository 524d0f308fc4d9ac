// tokenizer.json "decoder": ByteLevel, Metaspace, and the SentencePiece chain Replace, ByteFallback,
// Fuse, Strip; Sequence. Each works on the list of token strings (tokenizers' decode_chain); the
// result is their concatenation.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "text/json_read.h"

namespace lt::text {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

std::unique_ptr<Decoder> read_decoder(const Json& j, const std::string& where, const JsonReader& r);

}  // namespace lt::text
