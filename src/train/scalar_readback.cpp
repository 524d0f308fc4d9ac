#include "train/scalar_readback.h"

#include <cstdint>

#include "backend/backend.h"
#include "core/raw_view.h"
#include "leantrain/error.h"
#include "leantrain/memory.h"
#include "leantrain/ops.h"

namespace lt {

namespace {

constexpr int64_t kSlotBytes = 8;  // the widest scalar (f64, i64)

}  // namespace

ScalarReadback::ScalarReadback(Device d, size_t slots) : device_(d), slots_(slots) {}

ScalarReadback::~ScalarReadback() {
  // A copy may still be in flight into the pinned buffer: let it land before the buffer goes.
  for (size_t i = 0; i < used_; ++i)
    if (slots_[i].copied) slots_[i].copied->synchronize();
}

size_t ScalarReadback::push(const Tensor& scalar) {
  LT_CHECK(used_ < slots_.size(), "ScalarReadback: all " + std::to_string(slots_.size()) + " slots are taken",
           "each value is read before the slots are cleared", "clear() between steps");
  LT_CHECK(scalar.numel() == 1 && scalar.device() == device_, "ScalarReadback: a value of shape " +
           shape_str(scalar.shape()) + " on " + scalar.device().str(), "it reads one element of its own device",
           "push a one-element tensor of the run's device");
  if (!tried_pinned_) {
    tried_pinned_ = true;
    MemoryCategoryScope ws(Category::Workspace);
    pinned_ = allocate_pinned_host(kSlotBytes * int64_t(slots_.size()), device_);
  }
  const size_t i = used_++;
  Slot& s = slots_[i];
  s.dtype = scalar.dtype();
  s.fallback = Tensor();
  if (device_.is_meta()) return i;  // a plan: no values, nothing held (the run's allocations exactly)
  if (!pinned_ || !pinned_->data()) {
    s.fallback = scalar;  // the system would pin no more: read at the stream's tail
    return i;
  }
  if (!s.copied) s.copied = std::make_unique<Event>(device_);
  backend_for(device_).copy_to_host_async(static_cast<unsigned char*>(pinned_->data()) + kSlotBytes * int64_t(i),
                                          contiguous(scalar));
  s.copied->record();
  return i;
}

double ScalarReadback::read(size_t slot) {
  LT_CHECK(slot < used_, "ScalarReadback: slot " + std::to_string(slot) + " holds no value",
           "only the slots pushed since the last clear() can be read", "read a slot push() returned");
  Slot& s = slots_[slot];
  if (device_.is_meta()) return 0.0;  // a plan's dry run has no values
  if (s.fallback.defined()) {
    const double v = s.fallback.item();
    s.fallback = Tensor();
    return v;
  }
  s.copied->synchronize();
  // The slot's bytes as a CPU tensor: item() converts them as it does any tensor's.
  return raw_view(static_cast<const unsigned char*>(pinned_->data()) + kSlotBytes * int64_t(slot), {1}, s.dtype).item();
}

}  // namespace lt
