#include "memory/streams.h"

#include <algorithm>
#include <string>

#include "leantrain/error.h"

namespace lt {

namespace {
thread_local int t_stream = kComputeStream;
thread_local int t_alloc_stream = kComputeStream;
}  // namespace

void check_stream(int stream) {
  LT_CHECK(stream >= 0 && stream < kMaxStreams, "stream " + std::to_string(stream) + " does not exist",
           "streams are numbered 0 .. " + std::to_string(kMaxStreams - 1),
           "use kComputeStream or kCopyStream (memory/streams.h)");
}

int current_stream_id() { return t_stream; }
int current_alloc_stream() { return t_alloc_stream; }

StreamGuard::StreamGuard(int stream) : prev_stream_(t_stream), prev_alloc_(t_alloc_stream) {
  check_stream(stream);
  t_stream = stream;
  t_alloc_stream = stream;
}
StreamGuard::~StreamGuard() {
  t_stream = prev_stream_;
  t_alloc_stream = prev_alloc_;
}

AllocStreamScope::AllocStreamScope(int stream) : prev_(t_alloc_stream) {
  check_stream(stream);
  t_alloc_stream = stream;
}
AllocStreamScope::~AllocStreamScope() { t_alloc_stream = prev_; }

StreamMark StreamOrder::record(int stream) {
  check_stream(stream);
  auto& c = clock_[size_t(stream)];
  ++c[size_t(stream)];
  return StreamMark{stream, c};
}

void StreamOrder::wait(int stream, const StreamMark& m) {
  check_stream(stream);
  if (m.stream < 0) return;
  auto& c = clock_[size_t(stream)];
  for (size_t s = 0; s < c.size(); ++s) c[s] = std::max(c[s], m.clock[s]);
}

bool StreamOrder::orders_after(int stream, const StreamMark& m) const {
  check_stream(stream);
  if (m.stream < 0 || m.stream == stream) return true;
  return clock_[size_t(stream)][size_t(m.stream)] >= m.clock[size_t(m.stream)];
}

}  // namespace lt
