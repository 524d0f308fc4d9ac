#include "backend/event.h"

#include "backend/backend.h"
#include "memory/caching_policy.h"

namespace lt {

Event::Event(Device d) : device_(d) { native_ = backend_for(d).create_event(); }

Event::~Event() {
  if (!native_) return;
  try {
    backend_for(device_).destroy_event(native_);
  } catch (...) {  // the device is gone: nothing to release
  }
}

void Event::record() {
  backend_for(device_).record_event(native_);
  if (CachingAllocator* c = as_caching(allocator_for(device_))) mark_ = c->note_event(current_stream_id());
}

bool Event::done() { return backend_for(device_).event_done(native_); }

void Event::synchronize() { backend_for(device_).wait_event(native_); }

void Event::block_current_stream() {
  backend_for(device_).stream_wait_event(native_);
  if (CachingAllocator* c = as_caching(allocator_for(device_))) c->note_stream_wait(current_stream_id(), mark_);
}

void record_stream(const Tensor& t, int stream) {
  const auto& s = t.storage();
  if (!s || !s->allocator) return;
  if (CachingAllocator* c = as_caching(*s->allocator)) c->record_stream(s->block, stream);
}

}  // namespace lt
