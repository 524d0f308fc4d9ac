// Reading .jsonl text, shared by the SFT reader (jsonl.cpp) and the preference pairs
// (preference_pairs.cpp): each non-blank line with its 1-based number, and one line parsed as a
// JSON value with the errors every .jsonl reader gives.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace lt::data {

// Calls f(line, line_number) for every line that is not blank, a leading UTF-8 byte order mark
// skipped; numbers count the blank lines too, so they are the file's.
template <class F>
void for_each_jsonl_line(const std::string& text, F&& f) {
  int64_t line_no = 0;
  size_t pos = text.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    f(line, line_no);
  }
}

// One line as JSON; `bad(why)` throws the caller's error (file:line, its fix) when the line is not
// JSON, holds a number no double holds, or has a key twice.
nlohmann::json parse_jsonl_line(std::string_view line, const std::function<void(const std::string&)>& bad);

}  // namespace lt::data
