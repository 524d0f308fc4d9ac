// Tokenizing documents into a corpus. Placement of special tokens: each document (or a pair's
// prompt) is encoded with add_special, so BOS comes first when the tokenizer adds one; a pair's
// response is encoded without it and follows the prompt; EOS ends every document when the
// tokenizer has one (not twice, when its post-processor already put one there).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <thread>

#include "data/corpus_builder.h"
#include "leantrain/error.h"
#include "text/tokenizer.h"

namespace lt::data {

CorpusBuilder::CorpusBuilder(const text::Tokenizer& tok, const TextOptions& opt)
    : tok_(tok), opt_(opt), eos_(tok.eos_id()), corpus_(tok.vocab_size()) {
  LT_CHECK(opt.val_fraction >= 0 && opt.val_fraction < 1,
           "validation fraction " + std::to_string(opt.val_fraction) + " is out of range",
           "it is the share of the text held out", "use a value in [0, 1), e.g. 0.1");
  // The byte tokenizer's contract is id = byte value with no special tokens: its corpus is the
  // text itself, one byte a token, with no int32 copy on the way (as before tokenizers existed).
  bytes_ = tok.kind() == "bytes";
  if (eos_) {
    const std::vector<int32_t> empty = tok.encode("", true);
    post_adds_eos_ = !empty.empty() && empty.back() == *eos_;
  }
  period_ = opt.val_fraction > 0 ? std::max<int64_t>(2, std::llround(1.0 / opt.val_fraction)) : 0;
}

CorpusBuilder::Encoded CorpusBuilder::encode(const Document& d, const std::string& separator) const {
  Encoded e;
  if (d.chat) {
    // The template writes BOS and the end of each turn itself; nothing is added (TRL's
    // apply_chat_template tokenization).
    LT_ASSERT(chat_);  // add() asked for it
    text::ChatTokens t = text::chat_training_tokens(tok_, *chat_, *d.chat, opt_.train_on, text::ChatOptions{}, d.where);
    e.ids = std::move(t.ids);
    e.targets = std::move(t.assistant_mask);
    return e;
  }
  const bool sep = !eos_ && !separator.empty();
  if (d.prompt) {
    e.ids = tok_.encode(*d.prompt, true);
    if (post_adds_eos_ && !e.ids.empty() && e.ids.back() == *eos_) e.ids.pop_back();  // EOS ends the response
    e.masked = opt_.train_on == TrainOn::All ? 0 : e.ids.size();
    const std::vector<int32_t> r = tok_.encode(sep ? d.text + separator : d.text, false);
    e.ids.insert(e.ids.end(), r.begin(), r.end());
  } else {
    e.ids = tok_.encode(sep ? d.text + separator : d.text, true);
  }
  if (eos_ && (e.ids.empty() || e.ids.back() != *eos_)) e.ids.push_back(*eos_);
  return e;
}

TokenStream& CorpusBuilder::next_whole() {
  const bool val = period_ && whole_ % period_ == period_ - 1;
  ++whole_;
  return val ? corpus_.val : corpus_.train;
}

void CorpusBuilder::place(const Encoded& e, Placement placement) {
  const std::span<const int32_t> ids(e.ids);
  if (placement == Placement::Whole) {
    TokenStream& dst = next_whole();
    dst.start_document();
    if (!e.targets.empty()) {
      dst.append(ids, e.targets);
      return;
    }
    dst.append(ids.first(e.masked), false);
    dst.append(ids.subspan(e.masked), true);
    return;
  }
  LT_ASSERT(e.masked == 0 && e.targets.empty());
  const size_t n = ids.size(), cut = n - size_t(std::floor(double(n) * opt_.val_fraction));
  corpus_.train.start_document();
  corpus_.train.append(ids.first(cut));
  corpus_.val.start_document();
  corpus_.val.append(ids.subspan(cut));
}

void CorpusBuilder::place_bytes(const Document& d, const std::string& separator, Placement placement) {
  if (placement == Placement::Whole) {
    TokenStream& dst = next_whole();
    dst.start_document();
    if (d.prompt) dst.append_bytes(*d.prompt, opt_.train_on == TrainOn::All);
    dst.append_bytes(d.text);
    dst.append_bytes(separator);
    return;
  }
  LT_ASSERT(!d.prompt && separator.empty());
  const size_t n = d.text.size(), cut = n - size_t(std::floor(double(n) * opt_.val_fraction));
  corpus_.train.start_document();
  corpus_.train.append_bytes(std::string_view(d.text).substr(0, cut));
  corpus_.val.start_document();
  corpus_.val.append_bytes(std::string_view(d.text).substr(cut));
}

void CorpusBuilder::add(std::vector<Document> docs, Placement placement, const std::string& separator) {
  corpus_.documents += int64_t(docs.size());
  const bool chat = std::any_of(docs.begin(), docs.end(), [](const Document& d) { return d.chat.has_value(); });
  if (chat && !chat_) {
    const auto first = std::find_if(docs.begin(), docs.end(), [](const Document& d) { return d.chat.has_value(); });
    LT_CHECK(bool(opt_.chat_template), "chat data " + first->where, "the line is a conversation, and this run reads no chat template",
             "pass --chat-template FILE, or a tokenizer directory whose tokenizer_config.json has a chat_template");
    chat_ = opt_.chat_template();
  }
  if (bytes_ && !chat) {  // conversations go through the template and the tokenizer's encode
    for (const Document& d : docs) place_bytes(d, separator, placement);
    return;
  }
  // Documents are claimed one at a time by the threads and placed in order afterwards. The
  // tokenizer is shared: encode is safe to call concurrently (per-thread regex scratch, text/regex.cpp).
  std::vector<Encoded> out(docs.size());
  std::vector<std::exception_ptr> errors(docs.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < docs.size();) {
      try {
        out[i] = encode(docs[i], separator);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  const size_t threads = std::min<size_t>(size_t(std::max(1, opt_.workers)), docs.size());
  if (threads <= 1) {
    work();
  } else {
    std::vector<std::jthread> pool;
    for (size_t t = 0; t < threads; ++t) pool.emplace_back(work);
  }
  for (size_t i = 0; i < docs.size(); ++i) {
    if (errors[i]) std::rethrow_exception(errors[i]);  // the first document's error, for any thread count
    place(out[i], placement);
    out[i] = Encoded();
  }
}

}  // namespace lt::data
