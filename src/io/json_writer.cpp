#include "io/json_writer.h"

#include <cmath>
#include <cstdio>

#include "leantrain/error.h"

namespace lt::io {

void JsonWriter::before_value() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (stack_.empty()) return;
  Open& o = stack_.back();
  LT_ASSERT(!o.dict);  // a dict value must follow its key
  if (o.items++) out_.push_back(',');
}

void JsonWriter::key(std::string_view k) {
  LT_ASSERT(!stack_.empty() && stack_.back().dict && !after_key_);
  if (stack_.back().items++) out_.push_back(',');
  quoted(k);
  out_.push_back(':');
  after_key_ = true;
}

void JsonWriter::begin_dict(size_t n) {
  before_value();
  if (!stack_.empty() && !stack_.back().dict) out_.push_back('\n');
  out_.push_back('{');
  stack_.push_back({true, n});
}

void JsonWriter::end_dict() {
  LT_ASSERT(!stack_.empty() && stack_.back().dict && stack_.back().items == stack_.back().n && !after_key_);
  stack_.pop_back();
  out_.push_back('}');
}

void JsonWriter::begin_list(size_t n) {
  before_value();
  out_.push_back('[');
  stack_.push_back({false, n});
}

void JsonWriter::end_list() {
  LT_ASSERT(!stack_.empty() && !stack_.back().dict && stack_.back().items == stack_.back().n);
  stack_.pop_back();
  out_.push_back(']');
}

void JsonWriter::quoted(std::string_view s) {
  out_.push_back('"');
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out_.push_back('\\');
      out_.push_back(ch);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out_ += buf;
    } else {
      out_.push_back(ch);  // UTF-8 passes through
    }
  }
  out_.push_back('"');
}

void JsonWriter::str(std::string_view s) {
  before_value();
  quoted(s);
}

void JsonWriter::integer(int64_t v) {
  before_value();
  out_ += std::to_string(v);
}

void JsonWriter::uinteger(uint64_t v) {
  before_value();
  out_ += std::to_string(v);
}

void JsonWriter::real(double v) {
  before_value();
  if (!std::isfinite(v)) {
    out_ += "null";
    return;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  out_ += buf;
}

void JsonWriter::boolean(bool v) {
  before_value();
  out_ += v ? "true" : "false";
}

void JsonWriter::none() {
  before_value();
  out_ += "null";
}

std::string JsonWriter::take() {
  std::string s;
  s.swap(out_);
  return s;
}

std::string JsonWriter::finish() {
  LT_ASSERT(stack_.empty() && !after_key_);
  out_.push_back('\n');
  return take();
}

}  // namespace lt::io
