#include "io/unique_keys.h"

namespace lt::io {

nlohmann::json::parser_callback_t UniqueKeys::callback() const {
  return [st = seen_](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (event == E::object_start) st->open.emplace_back();
    else if (event == E::object_end && !st->open.empty()) st->open.pop_back();
    else if (event == E::key && !st->open.empty() && !st->open.back().insert(parsed.get<std::string>()).second &&
             st->duplicate.empty())
      st->duplicate = parsed.get<std::string>();
    return true;
  };
}

}  // namespace lt::io
