// Streams of a device, and what program order says about them.
//
// A device runs work on several streams: the compute stream (every op, unless told otherwise)
// a copy stream (host<->device copies that may overlap compute), a communication stream
// (collectives of several GPUs) and an optimizer stream (--fused-step's updates, beside the
// backward that produces the next gradients). A thread enqueues on its current stream, which a StreamGuard sets for a scope; the
// same guard makes the caching allocator serve that scope's allocations from the stream's pool.
//
// StreamOrder is the caching allocator's knowledge of how the streams are ordered, built only
// from statements in the program (an event recorded on a stream, a stream made to wait for an
// event), never from timing, so that a dry run on meta reaches the same conclusions as a GPU
// run. Note [Cross-stream reuse] in caching_policy.h says how the allocator uses it.
#pragma once
#include <array>
#include <cstdint>

namespace lt {

inline constexpr int kComputeStream = 0;
inline constexpr int kCopyStream = 1;
inline constexpr int kCommStream = 2;  // collectives (NCCL) that overlap compute
inline constexpr int kOptimStream = 3;  // a fused step's parameter updates beside the backward
inline constexpr int kNumDeviceStreams = 4;  // streams the CUDA backend creates on each device
inline constexpr int kMaxStreams = 8;        // stream numbers the allocator accepts (pools, uses)

// The stream this thread enqueues device work on (kComputeStream unless a StreamGuard says else).
int current_stream_id();
// The stream whose pool serves this thread's allocations (the current stream unless an
// AllocStreamScope says else): a block is handed out again only on the stream it was allocated
// for, unless another stream's use of it was recorded (Note [Cross-stream reuse]).
int current_alloc_stream();

// Work and allocations of the scope go to `stream` (checked: 0 <= stream < kMaxStreams; the CUDA
// backend accepts streams below kNumDeviceStreams).
class StreamGuard {
 public:
  explicit StreamGuard(int stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  int prev_stream_, prev_alloc_;
};

// Allocations only (tests, and code that allocates for another stream without running on it).
class AllocStreamScope {
 public:
  explicit AllocStreamScope(int stream);
  ~AllocStreamScope();
  AllocStreamScope(const AllocStreamScope&) = delete;
  AllocStreamScope& operator=(const AllocStreamScope&) = delete;

 private:
  int prev_;
};

// Where an event was recorded: its stream and that stream's vector clock at that moment.
struct StreamMark {
  int stream = -1;  // -1: never recorded (covers nothing, orders nothing)
  std::array<uint64_t, kMaxStreams> clock{};
};

// One vector clock per stream. clock[t][s] = n means: work enqueued on t from now on runs after
// the first n events recorded on s (and everything enqueued on s before them).
class StreamOrder {
 public:
  // An event recorded on `stream` now: the stream's own count goes up by one.
  StreamMark record(int stream);
  // `stream` waits for the event: from now on its work runs after everything the mark covers.
  void wait(int stream, const StreamMark& m);
  // Whether work enqueued on `stream` from now on runs after the event (always true on the
  // event's own stream, whose work runs in order; true for a mark never recorded).
  bool orders_after(int stream, const StreamMark& m) const;

 private:
  std::array<std::array<uint64_t, kMaxStreams>, kMaxStreams> clock_{};
};

void check_stream(int stream);  // fails with one line when stream is outside [0, kMaxStreams)

}  // namespace lt
