#include "io/text_format.h"

#include <cmath>
#include <cstdio>
#include <cstring>

namespace lt {

std::string short_number(double v, int significant) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.*g", significant, v);
  std::string s = buf;
  for (const char* from : {"e+0", "e+", "e-0"}) {
    size_t p = s.find(from);
    if (p != std::string::npos) s.replace(p, std::strlen(from), std::string(from) == "e-0" ? "e-" : "e");
  }
  return s;
}

std::string format_number(const char* printf_format, double v) {
  char b[64];
  std::snprintf(b, sizeof b, printf_format, v);
  return b;
}

std::string xml_escape(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&apos;"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n') o += ' ';
        else o += c;
    }
  }
  return o;
}

}  // namespace lt
