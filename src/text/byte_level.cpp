#include "text/byte_level.h"

#include "text/utf8.h"

namespace lt::text {

const ByteLevelTable& byte_level_table() {
  static const ByteLevelTable table = [] {
    ByteLevelTable t;
    t.char_to_byte.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t c = printable ? char32_t(b) : next++;
      utf8_append(t.byte_to_utf8[b], c);
      t.char_to_byte[c] = int16_t(b);
    }
    return t;
  }();
  return table;
}

std::string bytes_to_chars(std::string_view text) {
  const ByteLevelTable& t = byte_level_table();
  std::string out;
  out.reserve(text.size() * 2);
  for (unsigned char b : text) out += t.byte_to_utf8[b];
  return out;
}

bool chars_to_bytes(std::string_view token, std::string& out) {
  const ByteLevelTable& t = byte_level_table();
  const size_t mark = out.size();
  for (size_t i = 0; i < token.size();) {
    const char32_t c = utf8_decode_at(token, i);
    i += utf8_char_len(static_cast<unsigned char>(token[i]));
    if (c >= t.char_to_byte.size() || t.char_to_byte[c] < 0) {
      out.resize(mark);
      return false;
    }
    out += char(t.char_to_byte[c]);
  }
  return true;
}

}  // namespace lt::text
