// The offload phase trace (offload_trace.h).
#include "offload/offload_trace.h"

#include "backend/event.h"
#include "core/knobs.h"

#include <array>
#include <chrono>
#include <cstdio>
#include <mutex>

namespace lt::offload {

namespace {

constexpr std::array<const char*, size_t(Phase::Count)> kNames = {
    "forward", "backward", "fetch_wait", "drain_wait", "finish_wait", "norm",
    "early_steps", "early_wait", "device_wait", "late_steps", "copy_back_wait"};

struct Trace {
  std::mutex mu;
  std::array<double, size_t(Phase::Count)> ms{};
  double mark = 0, step_start = -1;
};

Trace& trace() {
  static Trace t;
  return t;
}

}  // namespace

bool trace_on() {
  static const bool on = knob_on("LEANTRAIN_OFFLOAD_TRACE");
  return on;
}

double trace_now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void trace_add(Phase p, double ms) {
  if (!trace_on()) return;
  Trace& t = trace();
  std::lock_guard<std::mutex> lk(t.mu);
  t.ms[size_t(p)] += ms;
}

void trace_lap(Phase p) {
  if (!trace_on()) return;
  Trace& t = trace();
  const double now = trace_now_ms();
  std::lock_guard<std::mutex> lk(t.mu);
  t.ms[size_t(p)] += now - t.mark;
  t.mark = now;
}

void trace_mark() {
  if (!trace_on()) return;
  Trace& t = trace();
  const double now = trace_now_ms();
  std::lock_guard<std::mutex> lk(t.mu);
  t.mark = now;
  if (t.step_start < 0) t.step_start = now;
}

void trace_device_wait(Event& e, Phase p) {
  if (!trace_on() || !e.asynchronous()) return;
  Event before(e.device());
  before.record();
  before.synchronize();
  const double t0 = trace_now_ms();
  e.synchronize();
  trace_add(p, trace_now_ms() - t0);
}

std::string trace_step_line(long long step) {
  Trace& t = trace();
  const double now = trace_now_ms();
  std::lock_guard<std::mutex> lk(t.mu);
  std::string line = "offload trace: step " + std::to_string(step);
  char buf[64];
  for (size_t i = 0; i < t.ms.size(); ++i) {
    std::snprintf(buf, sizeof buf, " %s=%.1f", kNames[i], t.ms[i]);
    line += buf;
  }
  std::snprintf(buf, sizeof buf, " step_wall=%.1f ms", t.step_start < 0 ? 0.0 : now - t.step_start);
  line += buf;
  t.ms = {};
  t.step_start = now;
  t.mark = now;
  return line;
}

}  // namespace lt::offload
