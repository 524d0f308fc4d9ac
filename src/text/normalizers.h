// tokenizer.json "normalizer": Sequence, Prepend, Replace (the SentencePiece-style Llama 2 layout).
// Unicode normalization forms (NFC, NFKC, NFD, NFKD) and case folding are refused: they need
// Unicode tables, which leantrain takes only from a library (docs/decisions.md).
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
