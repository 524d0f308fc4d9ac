// Small text helpers: numbers in messages and reports, escaping for SVG and HTML.
#pragma once
#include <string>

namespace lt {

// A number as a person would write it in a flag or a message, with up to `significant` digits:
// "1e-9" (not "1e-09"), "0.9", "3e-4" (3 digits), "NaN", "inf", "-inf".
std::string short_number(double v, int significant = 6);
// One number through a printf format with a single double conversion: ("%.2f ms", 1.5) -> "1.50 ms".
std::string format_number(const char* printf_format, double v);
// &, <, >, " and ' as XML entities (valid in SVG and HTML text and attribute values); control
// characters other than tab and newline, which XML 1.0 text does not allow, become spaces.
std::string xml_escape(const std::string& s);

}  // namespace lt
