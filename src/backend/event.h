// Events on a device's streams, and the stream uses of tensors: what code running work on a side
// stream (copies now, communication later) writes. An Event drives the backend's event (a
// cudaEvent_t on CUDA, nothing on cpu and meta, whose work is done when enqueued) and reports the
// same program order to the device's caching allocator on every device, so that a dry run on meta
// reuses memory exactly as the GPU run does (Note [Cross-stream reuse] in memory/caching_policy.h).
#pragma once
#include "leantrain/tensor.h"
#include "memory/streams.h"

namespace lt {

class Event {
 public:
  explicit Event(Device d);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  Device device() const { return device_; }
  // Whether the device runs work after enqueueing returns (CUDA); false on cpu and meta.
  bool asynchronous() const { return native_ != nullptr; }
  // On the thread's current stream, after the work enqueued on it so far. Work on one stream is
  // enqueued from one thread, so the order the allocator notes is the order the stream runs.
  void record();
  // Whether the recorded work has completed. A timing answer: use it to recycle host buffers,
  // never to decide a device allocation.
  bool done();
  void synchronize();  // the host waits until done()
  // Work enqueued on the thread's current stream from now on runs after the recorded work; the
  // host does not wait. The caching allocator learns this order.
  void block_current_stream();

 private:
  Device device_;
  void* native_ = nullptr;
  StreamMark mark_;
};

// t's memory is also used by `stream` (besides the stream it was allocated for): once freed, the
// caching allocator hands it out again only after that stream's use (PyTorch's record_stream).
// Nothing to do on allocators that keep no freed block.
void record_stream(const Tensor& t, int stream);

}  // namespace lt
