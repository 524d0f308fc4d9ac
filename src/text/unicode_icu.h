// Unicode character data and normalization from ICU, for the tokenizer components that need them
// (BertNormalizer, BertPreTokenizer, the NFC / NFD / NFKC / NFKD normalizers). ICU's common library is opened with dlopen on first use,
// not linked: the GPU machine has another ICU version than this one, and each version suffixes
// its symbols (u_charType_72), so the newest libicuuc.so.N present is taken and its symbols looked
// up with that suffix. Nothing else in leantrain needs ICU (docs/decisions.md).
#pragma once
#include <string>
#include <string_view>

namespace lt::text::unicode {

// General categories, as ICU numbers them (UCharCategory).
enum Category : int { Unassigned = 0, NonSpacingMark = 6, Control = 15, Format = 16, PrivateUse = 17, Surrogate = 18 };

// Each throws lt::Error naming ICU and how to install it when no ICU can be loaded.
int category(char32_t c);
bool is_white_space(char32_t c);  // the White_Space property (Rust's char::is_whitespace)
bool is_punctuation(char32_t c);  // categories Pc, Pd, Ps, Pe, Pi, Pf, Po
// Rust's char::to_lowercase appended to `out`: ICU's simple mapping, plus the one unconditional
// multi-character mapping of SpecialCasing.txt (U+0130 -> "i\u0307").
void append_lowercase(std::string& out, char32_t c);
// Valid UTF-8 in one of Unicode's normalization forms (tokenizers' NFC, NFD, NFKC, NFKD).
enum class Form { NFC = 0, NFD = 1, NFKC = 2, NFKD = 3 };
std::string normalize(std::string_view utf8, Form form);
std::string nfd(std::string_view utf8);  // normalize(utf8, Form::NFD)
// "ICU 72" once loaded, for messages and tests; throws as above.
std::string icu_version();

}  // namespace lt::text::unicode
