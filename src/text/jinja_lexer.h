// Jinja's lexer as transformers configures it (trim_blocks, lstrip_blocks, no trailing newline
// kept): template text into text, tag and expression tokens, with jinja2's whitespace rules
// ({%- -%} {{- -}} {%+ +%}, the first newline after a block or comment tag dropped, spaces and
// tabs before a block tag on its own line dropped).
#pragma once
#include <string>
#include <vector>

namespace lt::text::jinja {

enum class Tok { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, End };

struct Token {
  Tok type;
  std::string text;  // Text: the data; String: the unescaped value; Name/Op/Int/Float: as written
  int line;
};

// Throws RenderError ("line N: ...") on a tag that is not closed, a bad string or character.
std::vector<Token> lex(const std::string& source);

// Python's str.isspace() for one code point (what str.strip() and \s strip).
bool py_isspace(char32_t c);

}  // namespace lt::text::jinja
