// How a text corpus is assembled from documents (text.cpp reads fortunes and text files,
// jsonl.cpp JSON lines): each document is tokenized on its own, documents of one batch on
// several threads, and appended in order, so the corpus is the same for any thread count.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "leantrain/data.h"
#include "text/chat_data.h"

namespace lt::data {

struct Document {
  Document() = default;
  explicit Document(std::string t, std::optional<std::string> p = std::nullopt) : text(std::move(t)), prompt(std::move(p)) {}
  std::string text;                   // the whole document, or the response of a pair
  std::optional<std::string> prompt;  // a prompt/response pair: its tokens are not targets
  // A conversation, rendered by TextOptions::chat_template; `where` ("file:line") names it in errors.
  std::optional<text::ChatExample> chat;
  std::string where;
};

// Whole: every round(1/val_fraction)-th document of the corpus goes to validation.
// Tail: the last val_fraction of each document's tokens does.
enum class Placement { Whole, Tail };

class CorpusBuilder {
 public:
  CorpusBuilder(const text::Tokenizer& tok, const TextOptions& opt);
  // `separator` follows each document's text when the tokenizer has no EOS ("%\n" between
  // fortunes), so the model still sees where one ends.
  void add(std::vector<Document> docs, Placement placement, const std::string& separator);
  TokenCorpus finish() { return std::move(corpus_); }

 private:
  struct Encoded {
    std::vector<int32_t> ids;
    size_t masked = 0;             // the first `masked` ids are the prompt's
    std::vector<uint8_t> targets;  // a conversation: 1 where an id is a target (else empty)
  };
  Encoded encode(const Document& d, const std::string& separator) const;
  void place(const Encoded& e, Placement placement);
  void place_bytes(const Document& d, const std::string& separator, Placement placement);
  TokenStream& next_whole();  // the split of the next whole document

  const text::Tokenizer& tok_;
  TextOptions opt_;
  std::optional<int32_t> eos_;
  bool bytes_ = false;          // the byte tokenizer: ids are the text's bytes, no encode needed
  bool post_adds_eos_ = false;  // encode(text, add_special) ends with EOS
  int64_t period_ = 0, whole_ = 0;
  std::shared_ptr<const text::ChatTemplate> chat_;  // asked of opt_.chat_template at the first conversation
  TokenCorpus corpus_;
};

// Parses JSON lines (`text` is the file's contents, `path` names it in errors) into documents,
// handing them to `sink` in batches of about `batch_bytes` of text. A file whose first line holds
// "messages" is conversations (text::parse_chat_example checks each line), else every line is a
// text or a prompt/response pair; a line of the other kind is an error naming file:line.
void parse_jsonl(const std::string& text, const std::string& path, const TextOptions& opt, size_t batch_bytes,
                 const std::function<void(std::vector<Document>)>& sink);

}  // namespace lt::data
