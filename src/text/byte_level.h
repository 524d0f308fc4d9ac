// GPT-2's byte <-> character table (bytes_to_unicode): the byte-level BPE vocabularies spell every
// byte as one printable character. Bytes that are printable Latin-1 ('!'..'~', '¡'..'¬', '®'..'ÿ')
// stand for themselves; the other 68 take the code points 256, 257, ... in byte order.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace lt::text {

struct ByteLevelTable {
  std::array<std::string, 256> byte_to_utf8;  // the character of each byte, UTF-8 encoded
  std::array<int16_t, 324> char_to_byte;      // code point -> byte, -1 for other code points
};

const ByteLevelTable& byte_level_table();

// Every byte of `text` as its character (the ByteLevel pre-tokenizer's and normalizer's step).
std::string bytes_to_chars(std::string_view text);
// The bytes a token's characters stand for; false (out untouched) when a character of `token`
// is not in the table (tokenizers then takes the token's own UTF-8 bytes).
bool chars_to_bytes(std::string_view token, std::string& out);

}  // namespace lt::text
