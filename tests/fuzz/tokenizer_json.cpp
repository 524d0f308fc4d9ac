// load_tokenizer_json on arbitrary file bytes; for every tokenizer it accepts, encode (with and
// without special tokens) of a few fixed texts and of the input's own bytes as text, and decode
// of the ids: each id lies in 0..vocab_size-1, decode takes every id encode gave and returns
// valid UTF-8, and encoding twice gives the same ids (the BPE cache changes nothing). And a time
// bound per document: long documents (32 KiB of one letter, of spaces, of the input repeated) are
// encoded, or refused with lt::Error, within 2 seconds each, whatever the file's patterns (issue 47:
// a Split pattern such as \w*[xy]|. once took minutes on one document).
#include <chrono>
#include <string>
#include <vector>

#include "fuzz_input.h"
#include "text/tokenizer.h"
#include "text/utf8.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = lt::fuzz::write_input("tokenizer.json", data, size);
  std::unique_ptr<lt::text::Tokenizer> tok;
  lt::fuzz::rejects_only_with_error([&] { tok = lt::text::load_tokenizer_json(path); });
  if (!tok) return 0;
  const int64_t vocab = tok->vocab_size();
  lt::fuzz::require(vocab >= 0, "vocab_size is not negative");
  const std::string texts[] = {"", "Hello, world! It's 2024.", "  \t\n\n  x  ", "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x91\x8D",
                               "<s>a</s><|endoftext|>\xFF\xE2\x82", std::string(lt::fuzz::as_text(data, size > 512 ? 512 : size))};
  for (const std::string& text : texts)
    for (bool special : {false, true}) {
      // Encoding may refuse a text (e.g. a regex over its match limit), but only with lt::Error.
      lt::fuzz::rejects_only_with_error([&] {
        const std::vector<int32_t> ids = tok->encode(text, special);
        for (int32_t id : ids) lt::fuzz::require(id >= 0 && id < vocab, "encode gives ids below vocab_size");
        lt::fuzz::require(tok->encode(text, special) == ids, "encoding twice gives the same ids");
        for (bool skip : {false, true})
          lt::fuzz::require(lt::text::is_valid_utf8(tok->decode(ids, skip)), "decode returns valid UTF-8");
      });
    }
  std::string repeated;
  const std::string_view unit = lt::fuzz::as_text(data, size > 256 ? 256 : size);
  while (!unit.empty() && repeated.size() < 32768) repeated += unit;
  for (const std::string& doc : {std::string(32768, 'a'), std::string(32768, ' '), repeated}) {
    const auto start = std::chrono::steady_clock::now();
    lt::fuzz::rejects_only_with_error([&] { tok->encode(doc, true); });
    lt::fuzz::require(std::chrono::steady_clock::now() - start < std::chrono::seconds(2),
                      "a 32 KiB document is encoded (or refused) within 2 seconds");
  }
  return 0;
}
