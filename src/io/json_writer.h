// A streaming JSON writer with the PickleWriter's interface, so one routine can emit the same
// document as JSON and as a pickle without building it in memory first (a memory snapshot may
// hold a million events). Dicts inside lists start on a new line: one event per line.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lt::io {

class JsonWriter {
 public:
  void begin_dict(size_t n);
  void key(std::string_view k);
  void end_dict();
  void begin_list(size_t n);
  void end_list();

  void str(std::string_view s);
  void integer(int64_t v);
  void uinteger(uint64_t v);
  void real(double v);  // NaN and infinities become null
  void boolean(bool v);
  void none();

  std::string take();    // the text so far (removed from the writer)
  std::string finish();  // the rest; checks every container was closed

 private:
  void before_value();
  void quoted(std::string_view s);

  std::string out_;
  struct Open {
    bool dict;
    size_t n, items = 0;
  };
  std::vector<Open> stack_;
  bool after_key_ = false;
};

}  // namespace lt::io
