// UTF-8 helpers for the tokenizers: walking valid text by characters, and turning bytes that are
// not valid UTF-8 into valid text the way Python's bytes.decode("utf-8", errors="replace") and
// Rust's String::from_utf8_lossy both do (each maximal invalid subsequence becomes one U+FFFD).
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace lt::text {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// The byte length of the character starting with `lead` (in valid UTF-8).
inline size_t utf8_char_len(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

// The code point starting at s[i] (valid UTF-8).
char32_t utf8_decode_at(std::string_view s, size_t i);
void utf8_append(std::string& out, char32_t c);

// The number of characters in valid UTF-8 text.
size_t utf8_count(std::string_view s);

bool is_valid_utf8(std::string_view s);
// `s` with every maximal invalid subsequence replaced by U+FFFD (s itself when it is valid).
std::string to_valid_utf8(std::string_view s);

}  // namespace lt::text
