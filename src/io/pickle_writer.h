// A Python pickle emitter (protocol 4) for plain data: dict, list, str, int, float, bool, None.
// It exists to write PyTorch memory snapshots that torch.cuda._memory_viz and the
// pytorch.org/memory_viz page load (that page reads pickles only).
//
// Containers are announced with their size, so the writer can batch the way CPython's C pickler
// does (one item: SETITEM/APPEND; more: MARK ... SETITEMS/APPENDS in batches of 1000). Strings,
// lists and dicts are memoized as CPython memoizes them, so the bytes equal pickle.dumps(v, 4)'s,
// with one difference: equal strings share one memo entry (a BINGET on repeats), where CPython
// shares only the same string object; the result loads identically and stays small when the
// same keys repeat a million times.
// Output is cut into FRAMEs of about 64 KiB at value boundaries; take() hands out finished
// frames so a large pickle can be streamed to a file.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace lt::io {

class PickleWriter {
 public:
  PickleWriter();  // writes PROTO 4

  void begin_dict(size_t n);  // then n times: key(...), a value
  void key(std::string_view k) { str(k); }
  void end_dict();
  void begin_list(size_t n);  // then n values
  void end_list();

  void str(std::string_view s);
  void integer(int64_t v);
  void uinteger(uint64_t v);
  void real(double v);
  void boolean(bool v);
  void none();

  // Bytes of the frames completed so far (removed from the writer).
  std::string take();
  // Ends the pickle (STOP) and returns the remaining bytes. Checks every container was closed.
  std::string finish();

 private:
  struct Open {
    bool dict;
    size_t n, done = 0;  // items announced, items completed (a dict item is a key and a value)
    bool awaiting_value = false;
  };
  void before_value();  // a value starts: maybe MARK for a new batch
  void after_value();   // a value ended: maybe SETITEMS/APPENDS, maybe cut a frame
  void memoize();
  void put(uint8_t op) { frame_.push_back(char(op)); }
  void put_bytes(const void* p, size_t n) { frame_.append(static_cast<const char*>(p), n); }
  void commit_frame();

  std::string done_;   // PROTO and finished frames
  std::string frame_;  // the frame being filled
  std::vector<Open> stack_;
  std::unordered_map<std::string, uint32_t> memo_strings_;
  uint32_t memo_next_ = 0;
  bool finished_ = false;
};

}  // namespace lt::io
