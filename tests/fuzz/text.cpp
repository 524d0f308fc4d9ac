// The text readers on arbitrary bytes: parse_fortunes (in memory), load_fortunes over a
// directory holding the input as its one fortune file, load_text of the input as a file, and
// the token windows a GPT run cuts from the corpus; the input as a .jsonl file.
#include <memory>
#include <vector>

#include "fuzz_input.h"
#include "leantrain/data.h"
#include "text/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(lt::fuzz::as_text(data, size));
  lt::fuzz::rejects_only_with_error([&] {
    for (const std::string& entry : lt::parse_fortunes(text))
      lt::fuzz::require(!entry.empty() && entry.find_first_not_of(" \t\r\n") != std::string::npos,
                        "a fortune entry has text");
  });
  const std::string path = lt::fuzz::write_input("fortunes/input", data, size);
  static const auto bytes = lt::text::byte_tokenizer();
  lt::fuzz::rejects_only_with_error(
      [&] { lt::load_fortunes(*bytes, {}, (lt::fuzz::scratch_dir() / "fortunes").string()); });
  lt::fuzz::rejects_only_with_error([&] {
    lt::TextOptions opt;
    opt.val_fraction = 0.25;
    lt::TokenCorpus c = lt::load_text(path, *bytes, opt);
    lt::fuzz::require(size_t(c.train.size() + c.val.size()) == size, "the splits hold every byte");
    auto tokens = std::make_shared<const lt::TokenStream>(std::move(c.train));
    lt::TokenWindows windows(tokens, 4);
    std::vector<int64_t> input(4), target(4);
    windows.get(0, input.data(), target.data());
    windows.get(windows.size() - 1, input.data(), target.data());
  });
  // The same bytes as JSON lines: documents or one error naming file:line.
  const std::string jsonl = lt::fuzz::write_input("input.jsonl", data, size);
  lt::fuzz::rejects_only_with_error([&] { lt::load_text(jsonl, *bytes); });
  return 0;
}
