#include "text/unicode_icu.h"

#include <dlfcn.h>

#include <mutex>
#include <vector>

#include "leantrain/error.h"
#include "text/utf8.h"

namespace lt::text::unicode {

namespace {

using UChar = char16_t;
using UErrorCode = int;  // > 0: failure
struct UNormalizer2;

struct Icu {
  int version = 0;
  int8_t (*char_type)(int32_t) = nullptr;
  int8_t (*is_white_space)(int32_t) = nullptr;
  int32_t (*to_lower)(int32_t) = nullptr;
  const UNormalizer2* (*instance[4])(UErrorCode*) = {};  // NFC, NFD, NFKC, NFKD
  int32_t (*normalize)(const UNormalizer2*, const UChar*, int32_t, UChar*, int32_t, UErrorCode*) = nullptr;
  const UNormalizer2* forms[4] = {};
};

// The newest libicuuc.so.N from 99 down to 50, its symbols suffixed _N.
Icu load() {
  Icu icu;
  for (int v = 99; v >= 50; --v) {
    const std::string so = "libicuuc.so." + std::to_string(v);
    void* h = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) continue;
    auto sym = [&](const char* name) { return dlsym(h, (std::string(name) + "_" + std::to_string(v)).c_str()); };
    icu.char_type = reinterpret_cast<int8_t (*)(int32_t)>(sym("u_charType"));
    icu.is_white_space = reinterpret_cast<int8_t (*)(int32_t)>(sym("u_isUWhiteSpace"));
    icu.to_lower = reinterpret_cast<int32_t (*)(int32_t)>(sym("u_tolower"));
    const char* getters[4] = {"unorm2_getNFCInstance", "unorm2_getNFDInstance", "unorm2_getNFKCInstance",
                              "unorm2_getNFKDInstance"};
    for (int f = 0; f < 4; ++f) icu.instance[f] = reinterpret_cast<const UNormalizer2* (*)(UErrorCode*)>(sym(getters[f]));
    icu.normalize = reinterpret_cast<int32_t (*)(const UNormalizer2*, const UChar*, int32_t, UChar*, int32_t, UErrorCode*)>(
        sym("unorm2_normalize"));
    if (!icu.char_type || !icu.is_white_space || !icu.to_lower || !icu.normalize) continue;
    bool all = true;
    for (int f = 0; f < 4 && all; ++f) {
      UErrorCode e = 0;
      icu.forms[f] = icu.instance[f] ? icu.instance[f](&e) : nullptr;
      all = e <= 0 && icu.forms[f];
    }
    if (!all) continue;
    icu.version = v;
    return icu;  // the handle stays open for the process
  }
  return icu;
}

const Icu& icu() {
  static const Icu i = load();
  LT_CHECK(i.version, "Unicode data for the tokenizer: ICU (libicuuc.so) was not found",
           "BertNormalizer and BertPreTokenizer need Unicode categories, case mappings and NFD, which leantrain "
           "takes from the system's ICU",
           "install it (Debian 12: apt-get install libicu72; Ubuntu 24.04: libicu74)");
  return i;
}

}  // namespace

int category(char32_t c) { return icu().char_type(int32_t(c)); }

bool is_white_space(char32_t c) { return icu().is_white_space(int32_t(c)) != 0; }

bool is_punctuation(char32_t c) {
  const int t = category(c);
  return t >= 19 && t <= 23 ? true : t == 28 || t == 29;  // Pd Ps Pe Pc Po (19..23), Pi Pf (28, 29)
}

void append_lowercase(std::string& out, char32_t c) {
  if (c == 0x130) {  // LATIN CAPITAL LETTER I WITH DOT ABOVE -> i + COMBINING DOT ABOVE
    out += "i\xCC\x87";
    return;
  }
  utf8_append(out, char32_t(icu().to_lower(int32_t(c))));
}

std::string nfd(std::string_view s) { return normalize(s, Form::NFD); }

std::string normalize(std::string_view s, Form form) {
  const Icu& i = icu();
  const UNormalizer2* norm = i.forms[int(form)];
  std::u16string in;
  in.reserve(s.size());
  for (size_t k = 0; k < s.size(); k += utf8_char_len(static_cast<unsigned char>(s[k]))) {
    const char32_t c = utf8_decode_at(s, k);
    if (c < 0x10000) {
      in.push_back(char16_t(c));
    } else {
      in.push_back(char16_t(0xD800 + ((c - 0x10000) >> 10)));
      in.push_back(char16_t(0xDC00 + ((c - 0x10000) & 0x3FF)));
    }
  }
  // Decompositions grow text at most 18-fold per unit (NFKD of U+FDFA), usually far less; start at
  // 3-fold and retry once with the size ICU asks for.
  std::u16string out(in.size() * 3 + 16, u'\0');
  UErrorCode e = 0;
  int32_t n = i.normalize(norm, in.data(), int32_t(in.size()), out.data(), int32_t(out.size()), &e);
  if (e == 15 /* U_BUFFER_OVERFLOW_ERROR */) {
    out.assign(size_t(n) + 1, u'\0');
    e = 0;
    n = i.normalize(norm, in.data(), int32_t(in.size()), out.data(), int32_t(out.size()), &e);
  }
  LT_CHECK(e <= 0, "Unicode normalization failed (ICU error " + std::to_string(e) + ")", "ICU refused the text", "");
  std::string r;
  r.reserve(size_t(n) * 2);
  for (int32_t k = 0; k < n; ++k) {
    char32_t c = out[size_t(k)];
    if (c >= 0xD800 && c < 0xDC00 && k + 1 < n) c = 0x10000 + ((c - 0xD800) << 10) + (char32_t(out[size_t(++k)]) - 0xDC00);
    utf8_append(r, c);
  }
  return r;
}

std::string icu_version() { return "ICU " + std::to_string(icu().version); }

}  // namespace lt::text::unicode
