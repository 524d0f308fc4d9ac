// tokenizer.json "post_processor": what encode(text, add_special = true) adds around the ids.
// TemplateProcessing (a single-sequence template such as "<s> $A"), ByteLevel (offsets only: no
// ids change), Sequence. The pair template is not read: leantrain encodes single texts.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "text/json_read.h"

namespace lt::text {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Called only with add_special: the ids become the template's.
  virtual void add_special(std::vector<int32_t>& ids) const = 0;
  // The single special token the template puts first / last, when there is one (BOS / EOS).
  virtual std::optional<int32_t> leading_special() const { return std::nullopt; }
  virtual std::optional<int32_t> trailing_special() const { return std::nullopt; }
};

std::unique_ptr<PostProcessor> read_post_processor(const Json& j, const std::string& where, const JsonReader& r);

// The template [bos] $A [eos], as transformers builds it from tokenizer_config.json's
// add_bos_token / add_eos_token.
std::unique_ptr<PostProcessor> bos_eos_template(std::optional<int32_t> bos, std::optional<int32_t> eos);

}  // namespace lt::text
