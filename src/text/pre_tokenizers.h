// tokenizer.json "pre_tokenizer": ByteLevel (GPT-2's regex, or none), Split (a regex or literal,
// with tokenizers' five delimiter behaviours and invert), Digits, Metaspace, Sequence.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "text/json_read.h"
#include "text/pieces.h"

namespace lt::text {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits and transforms the plain pieces; added-token pieces pass through.
  virtual void pre_tokenize(std::vector<Piece>& pieces) const = 0;
  // Whether this is, or holds, a ByteLevel pre-tokenizer / a Metaspace one (Tokenizer::kind()).
  virtual bool has(const char* type) const = 0;
};

// Metaspace's settings (pre-tokenizer and decoder), as tokenizers reads them: prepend_scheme
// "always" by default; the older add_prefix_space false means "never".
enum class PrependScheme { Always, Never, First };
struct MetaspaceSettings {
  std::string replacement;
  PrependScheme scheme = PrependScheme::Always;
  bool split = true;
};
MetaspaceSettings read_metaspace(const Json& j, const std::string& where, const JsonReader& r);

std::unique_ptr<PreTokenizer> read_pre_tokenizer(const Json& j, const std::string& where, const JsonReader& r);

}  // namespace lt::text
