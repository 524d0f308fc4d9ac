// Prints a run's progress: on a terminal one line redrawn in place (at most ~10 times a second);
// otherwise (a log file, a pipe, CI) plain lines every `every` steps, first and last included.
#pragma once
#include <chrono>
#include <cstdio>
#include <string>

#include "leantrain/train.h"

namespace lt {

class ProgressPrinter {
 public:
  ProgressPrinter(std::FILE* out, bool tty, int64_t every) : out_(out), tty_(tty), every_(every) {}
  ~ProgressPrinter() { finish(); }

  void step(const ProgressInfo& p);
  void eval(const EvalInfo& e);
  void message(const std::string& line);  // a line of its own (does not disturb the TTY line)
  void finish();                           // ends the TTY line

  // The text of one progress report, without line control (tests use it).
  static std::string format(const ProgressInfo& p);
  static std::string format(const EvalInfo& e);

 private:
  void clear_line();
  std::FILE* out_;
  bool tty_;
  int64_t every_;
  bool line_open_ = false;
  std::string last_text_;
  std::chrono::steady_clock::time_point last_draw_{};
};

// True when `f` is a terminal (progress then redraws one line).
bool is_terminal(std::FILE* f);

}  // namespace lt
