#include "text/token_model.h"

#include <algorithm>

namespace lt::text {

void read_vocab(const Json& vocab, const std::string& where, const JsonReader& r, TokenMap& ids,
                std::vector<std::string>& tokens, std::vector<uint8_t>& has_token) {
  int64_t max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it)
    max_id = std::max(max_id, r.integer(it.value(), where + "['" + it.key() + "']", 0, kMaxTokenId));
  tokens.resize(size_t(max_id + 1));
  has_token.assign(size_t(max_id + 1), 0);
  ids.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const int32_t id = it.value().get<int32_t>();
    if (has_token[size_t(id)])
      r.fail(where, "id " + std::to_string(id) + " is given to both '" + tokens[size_t(id)] + "' and '" + it.key() + "'",
             "every token needs its own id");
    has_token[size_t(id)] = 1;
    tokens[size_t(id)] = it.key();
    ids.emplace(it.key(), id);
  }
}

}  // namespace lt::text
