// Conversation data for training: one `.jsonl` line {"messages": [...], "tools": [...]} checked
// and turned into token ids with a loss mask, by the model's chat template. The data pipeline and
// the CLI wire these (src/data, src/cli); nothing here reads files.
#pragma once
#include <string>

#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace lt::text {

struct ChatExample {
  OrderedJson messages;  // a list of {"role": str, "content": str | list | null, ...}
  OrderedJson tools;     // null when the line has none
};

// Parses and checks one line; `where` ("data.jsonl:12") names it in the one-line error.
ChatExample parse_chat_example(const std::string& line, const std::string& where);

// Which tokens the loss is on: the assistant's output (TRL's assistant_only_loss), or all.
enum class TrainOn { Assistant, All };

// The example rendered (add_generation_prompt=false), tokenized, and masked. `opt.kwargs` passes
// template variables such as {"enable_thinking": false}. An example with no assistant message
// under TrainOn::Assistant is an error naming `where` (it would add no loss).
ChatTokens chat_training_tokens(const Tokenizer& tok, const ChatTemplate& tmpl, const ChatExample& ex,
                                TrainOn on, const ChatOptions& opt, const std::string& where);

}  // namespace lt::text
