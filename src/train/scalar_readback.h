// One-element tensors copied to the host as soon as the stream has made them, and read later
// without waiting for the work queued behind them. Tensor::item() copies at the stream's tail: a
// loss read after the backward has been enqueued waits for the whole backward, and the host then
// prepares the update while the GPU idles (0.3-0.6 ms a step of TinyLlama's and GPT-2's). Here
// the copy is enqueued right after the value's producer, into a pinned slot with its own event, so
// a read waits only for that point (the forward's end, say) while the backward runs on.
//
// The slots' pinned buffer is allocated at the first push, from the device's pinned-host account,
// on every device alike (a plan counts it as a run does). On the CPU the copy happens at once; on
// meta (a plan) nothing is copied and reads give 0.
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

#include "backend/event.h"
#include "leantrain/tensor.h"

namespace lt {

class ScalarReadback {
 public:
  // `slots` values at most between clears.
  ScalarReadback(Device d, size_t slots);
  ~ScalarReadback();
  ScalarReadback(const ScalarReadback&) = delete;
  ScalarReadback& operator=(const ScalarReadback&) = delete;

  // Enqueues the copy of `scalar` (one element, on this readback's device) on the current stream;
  // returns its slot. Throws when every slot is taken.
  size_t push(const Tensor& scalar);
  // The value of `slot`: waits for its copy only.
  double read(size_t slot);
  // Frees every slot (the pinned buffer stays).
  void clear() { used_ = 0; }
  size_t size() const { return used_; }

 private:
  struct Slot {
    std::unique_ptr<Event> copied;
    DType dtype = DType::F32;
    Tensor fallback;  // when no pinned memory could be had: read with item()
  };
  Device device_;
  std::vector<Slot> slots_;
  size_t used_ = 0;
  std::shared_ptr<Storage> pinned_;  // 8 bytes a slot
  bool tried_pinned_ = false;
};

}  // namespace lt
