#include "text/jinja_lexer.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "text/jinja_error.h"
#include "text/utf8.h"

namespace lt::text::jinja {

bool py_isspace(char32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

namespace {

[[noreturn]] void syntax(int line, const std::string& why) {
  throw RenderError("line " + std::to_string(line) + ": " + why);
}

// Byte length of the Python-whitespace run starting at s[i].
size_t space_run(const std::string& s, size_t i) {
  size_t j = i;
  while (j < s.size()) {
    const size_t n = utf8_char_len(static_cast<unsigned char>(s[j]));
    if (j + n > s.size() || !py_isspace(utf8_decode_at(s, j))) break;
    j += n;
  }
  return j - i;
}

// s without its trailing Python whitespace (str.rstrip()).
std::string rstrip_py(const std::string& s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    if (!py_isspace(utf8_decode_at(s, start))) break;
    end = start;
  }
  return s.substr(0, end);
}

int count_newlines(const std::string& s, size_t from, size_t to) {
  int n = 0;
  for (size_t i = from; i < to; ++i) n += s[i] == '\n';
  return n;
}

// jinja2's string literal: Python escapes (decoded as "unicode-escape" does).
std::string unescape(const std::string& raw, int line) {
  std::string out;
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '\\' || i + 1 == raw.size()) {
      out += raw[i];
      continue;
    }
    const char c = raw[++i];
    auto hex = [&](int n) {
      char32_t v = 0;
      for (int k = 1; k <= n; ++k) {
        if (i + k >= raw.size() || !std::isxdigit(static_cast<unsigned char>(raw[i + k])))
          syntax(line, "a truncated \\x, \\u or \\U escape in a string");
        v = v * 16 + char32_t(std::stoi(std::string(1, raw[i + k]), nullptr, 16));
      }
      i += n;
      if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) syntax(line, "an escape for a code point UTF-8 cannot hold");
      utf8_append(out, v);
    };
    switch (c) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'v': out += '\v'; break;
      case '\n': break;  // a backslash-newline joins lines
      case 'x': hex(2); break;
      case 'u': hex(4); break;
      case 'U': hex(8); break;
      case 'N': syntax(line, "\\N{...} escapes are not supported in template strings");
      default:
        if (c >= '0' && c <= '7') {
          int v = c - '0', k = 1;
          while (k < 3 && i + 1 < raw.size() && raw[i + 1] >= '0' && raw[i + 1] <= '7') v = v * 8 + (raw[++i] - '0'), ++k;
          utf8_append(out, char32_t(v));
        } else {
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

struct Lexer {
  std::string src;
  size_t pos = 0;
  int line = 1;
  bool line_starting = true;
  std::vector<Token> out;

  void emit(Tok t, std::string text, int at) { out.push_back({t, std::move(text), at}); }

  void run() {
    while (pos < src.size()) {
      size_t start = std::string::npos;
      for (const char* open : {"{{", "{%", "{#"}) start = std::min(start, src.find(open, pos));
      if (start == std::string::npos) {
        emit(Tok::Text, src.substr(pos), line);
        line += count_newlines(src, pos, src.size());
        pos = src.size();
        break;
      }
      const char kind = src[start + 1];
      const char sign = start + 2 < src.size() ? src[start + 2] : 0;
      std::string text = src.substr(pos, start - pos);
      const int text_line = line;
      line += count_newlines(src, pos, start);
      if (sign == '-') {
        text = rstrip_py(text);
      } else if (sign != '+' && kind != '{') {
        // lstrip_blocks: only whitespace between the line's start and the tag goes.
        const size_t l_pos = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size() && space_run(text, l_pos) == text.size() - l_pos)
          text.resize(l_pos);
      }
      if (!text.empty()) emit(Tok::Text, text, text_line);
      pos = start + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      if (kind == '#') comment(start);
      else tag(kind == '{');
    }
  }

  // After a block or comment end: trim_blocks drops one newline; "-" drops all whitespace.
  void after_end(size_t end_pos, char sign, bool block) {
    pos = end_pos;
    if (sign == '-') {
      const size_t n = space_run(src, pos);
      line += count_newlines(src, pos, pos + n);
      pos += n;
    } else if (sign != '+' && block && pos < src.size() && src[pos] == '\n') {
      ++pos;
      ++line;
    }
    line_starting = pos > 0 && src[pos - 1] == '\n';
  }

  void comment(size_t start) {
    const int at = line;
    for (size_t p = pos; p + 1 < src.size(); ++p) {
      const char sign = src[p];
      if ((sign == '+' || sign == '-') && src.compare(p + 1, 2, "#}") == 0) {
        line += count_newlines(src, pos, p);
        after_end(p + 3, sign, true);
        return;
      }
      if (src.compare(p, 2, "#}") == 0) {
        line += count_newlines(src, pos, p);
        after_end(p + 2, 0, true);
        return;
      }
    }
    (void)start;
    syntax(at, "a comment {# ... is never closed with #}");
  }

  void tag(bool variable) {
    const int at = line;
    emit(variable ? Tok::VarBegin : Tok::BlockBegin, "", line);
    std::string stack;  // open brackets
    for (;;) {
      if (pos >= src.size()) syntax(at, std::string("a tag ") + (variable ? "{{" : "{%") + " is never closed");
      if (stack.empty()) {
        const char* close = variable ? "}}" : "%}";
        for (char sign : {'-', '+', '\0'}) {
          if (sign == '+' && variable) continue;
          const size_t p = pos + (sign ? 1 : 0);
          if ((!sign || src[pos] == sign) && src.compare(p, 2, close) == 0) {
            emit(variable ? Tok::VarEnd : Tok::BlockEnd, "", line);
            after_end(p + 2, sign, !variable);
            return;
          }
        }
      }
      const char c = src[pos];
      if (const size_t n = space_run(src, pos)) {
        line += count_newlines(src, pos, pos + n);
        pos += n;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        number();
      } else if (is_name_start(c)) {
        size_t e = pos;
        while (e < src.size() && is_name_char(src[e])) ++e;
        emit(Tok::Name, src.substr(pos, e - pos), line);
        pos = e;
      } else if (c == '\'' || c == '"') {
        string_literal(c);
      } else {
        static const char* two[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op;
        for (const char* t : two)
          if (src.compare(pos, 2, t) == 0) op = t;
        if (op.empty()) {
          if (!std::strchr("+-/*%~[](){}<>=.:|,;", c)) syntax(line, std::string("unexpected character '") + c + "'");
          op = std::string(1, c);
        }
        if (op == "(" || op == "[" || op == "{") stack += op;
        if (op == ")" || op == "]" || op == "}") {
          const char want = op == ")" ? '(' : op == "]" ? '[' : '{';
          if (stack.empty() || stack.back() != want) syntax(line, "unexpected '" + op + "'");
          stack.pop_back();
        }
        emit(Tok::Op, op, line);
        pos += op.size();
      }
    }
  }

  void number() {
    size_t e = pos;
    auto digits = [&] {
      while (e < src.size() && (std::isdigit(static_cast<unsigned char>(src[e])) || src[e] == '_')) ++e;
    };
    digits();
    bool is_float = false;
    if (e + 1 < src.size() && src[e] == '.' && std::isdigit(static_cast<unsigned char>(src[e + 1]))) {
      ++e;
      digits();
      is_float = true;
    }
    if (e < src.size() && (src[e] == 'e' || src[e] == 'E')) {
      size_t k = e + 1;
      if (k < src.size() && (src[k] == '+' || src[k] == '-')) ++k;
      if (k < src.size() && std::isdigit(static_cast<unsigned char>(src[k]))) {
        e = k;
        digits();
        is_float = true;
      }
    }
    std::string t = src.substr(pos, e - pos);
    t.erase(std::remove(t.begin(), t.end(), '_'), t.end());
    emit(is_float ? Tok::Float : Tok::Int, t, line);
    pos = e;
  }

  void string_literal(char q) {
    size_t e = pos + 1;
    while (e < src.size() && src[e] != q) e += src[e] == '\\' ? 2 : 1;
    if (e >= src.size()) syntax(line, "a string is never closed");
    emit(Tok::String, unescape(src.substr(pos + 1, e - pos - 1), line), line);
    line += count_newlines(src, pos, e);
    pos = e + 1;
  }
};

}  // namespace

std::vector<Token> lex(const std::string& source) {
  Lexer lx;
  // Newlines normalized to \n; one trailing newline dropped (keep_trailing_newline=False).
  lx.src.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      lx.src += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      lx.src += source[i];
    }
  }
  if (!lx.src.empty() && lx.src.back() == '\n') lx.src.pop_back();
  lx.run();
  lx.emit(Tok::End, "", lx.line);
  return lx.out;
}

}  // namespace lt::text::jinja
