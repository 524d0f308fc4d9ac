// Conversation data for training: one `.jsonl` line {"messages": [...], "tools": [...]} checked
// and turned into token ids with a loss mask, by the model's chat template. The data pipeline
// (src/data/jsonl.cpp, corpus_builder.cpp) calls these for `train --data FILE.jsonl`; another
// objective (preference pairs) can call them on its own examples. Nothing here reads files.
#pragma once
#include <string>

#include "leantrain/choices.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace lt::text {

struct ChatExample {
  OrderedJson messages;  // a list of {"role": str, "content": str | list | null, ...}
  OrderedJson tools;     // null when the line has none
};

// Parses and checks one line; `where` ("data.jsonl:12") names it in the one-line error.
ChatExample parse_chat_example(const std::string& line, const std::string& where);

// Which tokens the loss is on: the assistant's output (TRL's assistant_only_loss), or all
// (lt::TrainOn, leantrain/choices.h: the --train-on flag's values).
using TrainOn = lt::TrainOn;

// The example rendered (add_generation_prompt=false), tokenized (encode(text, add_special=false),
// as apply_chat_template tokenizes: the template writes BOS), and masked: assistant_mask[i] is 1
// where id i carries loss (on = All: every id). `opt.kwargs` passes template variables such as
// {"enable_thinking": false}. Every error, the template's own included (raise_exception on a
// role it refuses), is one line starting "chat data <where>: "; an example with no assistant
// message under TrainOn::Assistant is one too (it would add no loss).
ChatTokens chat_training_tokens(const Tokenizer& tok, const ChatTemplate& tmpl, const ChatExample& ex,
                                TrainOn on, const ChatOptions& opt, const std::string& where);

}  // namespace lt::text
