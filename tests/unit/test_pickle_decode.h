// A small unpickler for tests: the opcodes PickleWriter emits, decoded into nlohmann::json, with
// the checks Python's unpickler makes on frames (no opcode may cross a frame's end).
#pragma once
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace lt::test {

struct Unpickled {
  nlohmann::json value;
  int frames = 0;
  std::vector<uint64_t> frame_sizes;
};

inline Unpickled unpickle(const std::string& b) {
  using nlohmann::json;
  Unpickled r;
  size_t pos = 0, frame_end = 0;
  bool in_frame = false;
  std::vector<json> stack, memo;
  std::vector<size_t> marks;
  auto need = [&](size_t n) {
    if (pos + n > b.size()) throw std::runtime_error("truncated pickle");
    if (in_frame && pos + n > frame_end) throw std::runtime_error("opcode crosses a frame end");
  };
  auto u8 = [&]() { need(1); return uint8_t(b[pos++]); };
  auto le = [&](int n) {
    need(size_t(n));
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= uint64_t(uint8_t(b[pos + size_t(i)])) << (8 * i);
    pos += size_t(n);
    return v;
  };
  auto text = [&](size_t n) {
    need(n);
    std::string s = b.substr(pos, n);
    pos += n;
    return json(s);
  };
  auto pop_mark = [&]() {
    if (marks.empty()) throw std::runtime_error("no MARK");
    size_t m = marks.back();
    marks.pop_back();
    return m;
  };
  for (;;) {
    if (in_frame && pos == frame_end) in_frame = false;
    const uint8_t op = u8();
    switch (op) {
      case 0x80: if (u8() != 4) throw std::runtime_error("not protocol 4"); break;
      case 0x95: {
        if (in_frame) throw std::runtime_error("FRAME inside a frame");
        uint64_t n = le(8);
        r.frames++;
        r.frame_sizes.push_back(n);
        in_frame = true;
        frame_end = pos + n;
        break;
      }
      case '}': stack.push_back(json::object()); break;
      case ']': stack.push_back(json::array()); break;
      case 0x94: memo.push_back(stack.back()); break;
      case 'h': {
        size_t i = u8();
        if (i >= memo.size() || !memo[i].is_string()) throw std::runtime_error("BINGET of a non-string");
        stack.push_back(memo[i]);
        break;
      }
      case 'j': {
        size_t i = size_t(le(4));
        if (i >= memo.size() || !memo[i].is_string()) throw std::runtime_error("LONG_BINGET of a non-string");
        stack.push_back(memo[i]);
        break;
      }
      case '(': marks.push_back(stack.size()); break;
      case 's': {
        json v = stack.back(); stack.pop_back();
        json k = stack.back(); stack.pop_back();
        stack.back()[k.get<std::string>()] = v;
        break;
      }
      case 'u': {
        size_t m = pop_mark();
        for (size_t i = m; i + 1 < stack.size(); i += 2) stack[m - 1][stack[i].get<std::string>()] = stack[i + 1];
        stack.resize(m);
        break;
      }
      case 'a': {
        json v = stack.back(); stack.pop_back();
        stack.back().push_back(v);
        break;
      }
      case 'e': {
        size_t m = pop_mark();
        for (size_t i = m; i < stack.size(); ++i) stack[m - 1].push_back(stack[i]);
        stack.resize(m);
        break;
      }
      case 0x8c: { size_t n = u8(); stack.push_back(text(n)); break; }
      case 'X': { size_t n = size_t(le(4)); stack.push_back(text(n)); break; }
      case 'K': stack.push_back(json(int64_t(u8()))); break;
      case 'M': stack.push_back(json(int64_t(le(2)))); break;
      case 'J': stack.push_back(json(int64_t(int32_t(uint32_t(le(4)))))); break;
      case 0x8a: {
        int n = u8();
        if (n == 9) {
          uint64_t v = le(8);
          if (u8() != 0) throw std::runtime_error("LONG1 out of range");
          stack.push_back(json(v));
        } else {
          if (n < 1 || n > 8) throw std::runtime_error("LONG1 size");
          uint64_t v = le(n);
          if (n < 8 && (v >> (8 * n - 1)) & 1) v |= ~uint64_t(0) << (8 * n);  // sign-extend
          stack.push_back(json(int64_t(v)));
        }
        break;
      }
      case 'G': {
        uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = bits << 8 | u8();
        double d;
        std::memcpy(&d, &bits, 8);
        stack.push_back(json(d));
        break;
      }
      case 'N': stack.push_back(json(nullptr)); break;
      case 0x88: stack.push_back(json(true)); break;
      case 0x89: stack.push_back(json(false)); break;
      case '.':
        if (stack.size() != 1 || !marks.empty()) throw std::runtime_error("bad stack at STOP");
        if (pos != b.size()) throw std::runtime_error("bytes after STOP");
        if (in_frame && pos != frame_end) throw std::runtime_error("STOP before the frame's end");
        r.value = stack.back();
        return r;
      default: throw std::runtime_error("unexpected opcode " + std::to_string(op));
    }
  }
}

}  // namespace lt::test
