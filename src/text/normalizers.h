// tokenizer.json "normalizer": Sequence, Prepend, Replace (the SentencePiece-style Llama 2 layout),
// and those that need Unicode tables, which leantrain takes from the system's ICU at run time
// (text/unicode_icu.h, docs/decisions.md): NFC, NFD, NFKC, NFKD (Qwen2), BertNormalizer,
// Lowercase, StripAccents.
#pragma once
#include <memory>
#include <string>

#include "text/json_read.h"
#include "text/pieces.h"

namespace lt::text {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(Piece& p) const = 0;
};

std::unique_ptr<Normalizer> read_normalizer(const Json& j, const std::string& where, const JsonReader& r);

}  // namespace lt::text
