#include "io/pickle_writer.h"

#include <cstring>

#include "leantrain/error.h"

namespace lt::io {

namespace {
// Opcodes (Lib/pickle.py names).
constexpr uint8_t PROTO = 0x80, FRAME = 0x95, STOP = '.', MEMOIZE = 0x94;
constexpr uint8_t EMPTY_DICT = '}', EMPTY_LIST = ']', MARK = '(', SETITEM = 's', SETITEMS = 'u';
constexpr uint8_t APPEND = 'a', APPENDS = 'e', BINGET = 'h', LONG_BINGET = 'j';
constexpr uint8_t SHORT_BINUNICODE = 0x8c, BINUNICODE = 'X';
constexpr uint8_t BININT = 'J', BININT1 = 'K', BININT2 = 'M', LONG1 = 0x8a, BINFLOAT = 'G';
constexpr uint8_t NONE = 'N', NEWTRUE = 0x88, NEWFALSE = 0x89;
constexpr size_t kBatch = 1000;              // CPython's _BATCHSIZE
constexpr size_t kFrameTarget = 64 * 1024;   // CPython's _FRAME_SIZE_TARGET
constexpr size_t kFrameMin = 4;              // smaller frames are written without a FRAME header

void le(std::string& out, uint64_t v, int nbytes) {
  for (int i = 0; i < nbytes; ++i) out.push_back(char((v >> (8 * i)) & 0xff));
}
}  // namespace

PickleWriter::PickleWriter() {
  done_.push_back(char(PROTO));
  done_.push_back(char(4));
}

void PickleWriter::before_value() {
  LT_ASSERT(!finished_);
  if (stack_.empty()) return;
  Open& o = stack_.back();
  if (o.dict && o.awaiting_value) return;  // the value of a pair already started by its key
  LT_ASSERT(o.done < o.n);
  if (o.n > 1 && o.done % kBatch == 0) put(MARK);
}

void PickleWriter::after_value() {
  if (!stack_.empty()) {
    Open& o = stack_.back();
    if (o.dict && !o.awaiting_value) {
      o.awaiting_value = true;  // that was a key
      return;
    }
    o.awaiting_value = false;
    ++o.done;
    if (o.n == 1) put(o.dict ? SETITEM : APPEND);
    else if (o.done % kBatch == 0 || o.done == o.n) put(o.dict ? SETITEMS : APPENDS);
  }
  if (frame_.size() >= kFrameTarget) commit_frame();
}

void PickleWriter::memoize() {
  put(MEMOIZE);
  ++memo_next_;
}

void PickleWriter::begin_dict(size_t n) {
  before_value();
  put(EMPTY_DICT);
  memoize();
  stack_.push_back({true, n});
}

void PickleWriter::end_dict() {
  LT_ASSERT(!stack_.empty() && stack_.back().dict && stack_.back().done == stack_.back().n);
  // CPython's C pickler closes a dict of a multiple of 1000 items with one empty batch; so do we.
  if (const size_t n = stack_.back().n; n > 1 && n % kBatch == 0) {
    put(MARK);
    put(SETITEMS);
  }
  stack_.pop_back();
  after_value();
}

void PickleWriter::begin_list(size_t n) {
  before_value();
  put(EMPTY_LIST);
  memoize();
  stack_.push_back({false, n});
}

void PickleWriter::end_list() {
  LT_ASSERT(!stack_.empty() && !stack_.back().dict && stack_.back().done == stack_.back().n);
  stack_.pop_back();
  after_value();
}

void PickleWriter::str(std::string_view s) {
  before_value();
  auto it = memo_strings_.find(std::string(s));
  if (it != memo_strings_.end()) {
    if (it->second < 256) {
      put(BINGET);
      put(uint8_t(it->second));
    } else {
      put(LONG_BINGET);
      le(frame_, it->second, 4);
    }
  } else {
    if (s.size() <= 0xff) {
      put(SHORT_BINUNICODE);
      put(uint8_t(s.size()));
    } else {
      LT_CHECK(s.size() <= 0xffffffffull, "cannot pickle a string", "it is longer than 4 GiB", "");
      put(BINUNICODE);
      le(frame_, s.size(), 4);
    }
    put_bytes(s.data(), s.size());
    memo_strings_.emplace(std::string(s), memo_next_);
    memoize();
  }
  after_value();
}

void PickleWriter::integer(int64_t v) {
  before_value();
  if (v >= 0 && v <= 0xff) {
    put(BININT1);
    put(uint8_t(v));
  } else if (v >= 0 && v <= 0xffff) {
    put(BININT2);
    le(frame_, uint64_t(v), 2);
  } else if (v >= INT32_MIN && v <= INT32_MAX) {
    put(BININT);
    le(frame_, uint64_t(uint32_t(int32_t(v))), 4);
  } else {
    // LONG1: the shortest little-endian two's complement, as CPython's encode_long.
    std::string b;
    le(b, uint64_t(v), 8);
    while (b.size() > 1) {
      uint8_t last = uint8_t(b.back()), prev = uint8_t(b[b.size() - 2]);
      if ((last == 0x00 && !(prev & 0x80)) || (last == 0xff && (prev & 0x80))) b.pop_back();
      else break;
    }
    put(LONG1);
    put(uint8_t(b.size()));
    frame_ += b;
  }
  after_value();
}

void PickleWriter::uinteger(uint64_t v) {
  if (v <= uint64_t(INT64_MAX)) return integer(int64_t(v));
  before_value();
  put(LONG1);
  put(9);  // the top bit is set: one more byte keeps the number positive
  le(frame_, v, 8);
  put(0);
  after_value();
}

void PickleWriter::real(double v) {
  before_value();
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  put(BINFLOAT);
  for (int i = 7; i >= 0; --i) put(uint8_t((bits >> (8 * i)) & 0xff));  // big-endian
  after_value();
}

void PickleWriter::boolean(bool v) {
  before_value();
  put(v ? NEWTRUE : NEWFALSE);
  after_value();
}

void PickleWriter::none() {
  before_value();
  put(NONE);
  after_value();
}

void PickleWriter::commit_frame() {
  if (frame_.size() >= kFrameMin) {
    done_.push_back(char(FRAME));
    le(done_, frame_.size(), 8);
  }
  done_ += frame_;
  frame_.clear();
}

std::string PickleWriter::take() {
  std::string out;
  out.swap(done_);
  return out;
}

std::string PickleWriter::finish() {
  LT_ASSERT(!finished_ && stack_.empty());
  put(STOP);
  commit_frame();
  finished_ = true;
  return take();
}

}  // namespace lt::io
