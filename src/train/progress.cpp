#include "train/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>

namespace lt {

bool is_terminal(std::FILE* f) {
  // Ranks under mpirun write to its pseudo-terminal whatever the job's output is; the launcher
  // (dist::launch_local) tells them what its own standard output was.
  if (f == stdout)
    if (const char* v = std::getenv("LEANTRAIN_STDOUT_IS_TERMINAL"); v && (v == std::string("0") || v == std::string("1")))
      return v[0] == '1';
  return isatty(fileno(f)) == 1;
}

namespace {

// " | rewards/chosen 0.0123 | rewards/rejected -0.0456 | ..." after a line's own fields.
std::string with_metrics(std::string line, const std::vector<Metric>& metrics) {
  for (const Metric& m : metrics) {
    char buf[96];
    std::snprintf(buf, sizeof buf, " | %s %.4f", m.name.c_str(), m.value);
    line += buf;
  }
  return line;
}

}  // namespace

std::string ProgressPrinter::format(const ProgressInfo& p) {
  char buf[320];
  int width = int(std::to_string(p.total_steps).size());
  double pct = p.total_steps ? 100.0 * double(p.step) / double(p.total_steps) : 0.0;
  std::snprintf(buf, sizeof buf,
                "step %*lld/%lld (%3.0f%%) epoch %.2f | loss %.4f | lr %.2e | %.0f %s | ETA %s | mem %s (peak %s)",
                width, (long long)p.step, (long long)p.total_steps, pct, p.epoch, p.loss, p.lr, p.items_per_s,
                p.unit, format_duration(p.eta_s).c_str(), format_bytes(p.mem_current).c_str(),
                format_bytes(p.mem_peak).c_str());
  return with_metrics(buf, p.metrics);
}

std::string ProgressPrinter::format(const EvalInfo& e) {
  char buf[160];
  if (e.accuracy)
    std::snprintf(buf, sizeof buf, "eval step %lld | test loss %.4f | test accuracy %.2f%%", (long long)e.step, e.loss,
                  100.0 * *e.accuracy);
  else
    std::snprintf(buf, sizeof buf, "eval step %lld | validation loss %.4f", (long long)e.step, e.loss);
  return with_metrics(buf, e.metrics);
}

void ProgressPrinter::clear_line() {
  if (line_open_) {
    std::fputs("\r\033[K", out_);
    line_open_ = false;
  }
}

void ProgressPrinter::step(const ProgressInfo& p) {
  if (tty_) {
    auto now = std::chrono::steady_clock::now();
    bool last = p.step == p.total_steps;
    if (!last && line_open_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    last_text_ = format(p);
    std::fputs("\r\033[K", out_);
    std::fputs(last_text_.c_str(), out_);
    line_open_ = true;
  } else {
    int64_t every = every_ > 0 ? every_ : std::max<int64_t>(1, p.total_steps / 20);
    if (p.step != 1 && p.step % every != 0 && p.step != p.total_steps) return;
    std::fputs(format(p).c_str(), out_);
    std::fputc('\n', out_);
  }
  std::fflush(out_);
}

void ProgressPrinter::eval(const EvalInfo& e) { message(format(e)); }

void ProgressPrinter::message(const std::string& line) {
  bool redraw = line_open_;
  clear_line();
  std::fputs(line.c_str(), out_);
  std::fputc('\n', out_);
  if (redraw) {  // the progress line stays the last line of the screen
    std::fputs(last_text_.c_str(), out_);
    line_open_ = true;
  }
  std::fflush(out_);
}

void ProgressPrinter::finish() {
  if (line_open_) {
    std::fputc('\n', out_);
    line_open_ = false;
    std::fflush(out_);
  }
}

}  // namespace lt
