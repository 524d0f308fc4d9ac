// --offload optimizer's gradients moved to the host during backward, and the update that reads
// them there (offload_optimizer.h, "Draining during backward"; docs/decisions.md).
//
// Every choice below follows program order, never timing, so cpu (plain copies), meta (no copies)
// and cuda take the same memory in the same order and `leantrain plan` predicts the device and the
// pinned-host peaks of a run.
#include <cstring>
#include <deque>
#include <unordered_map>

#include "backend/backend.h"
#include "backend/event.h"
#include "leantrain/error.h"
#include "leantrain/ops.h"
#include "offload/offload_optimizer.h"

namespace lt::offload {

namespace {

int64_t align64(int64_t b) { return (b + 63) / 64 * 64; }

}  // namespace

struct OffloadOptimizer::Drain {
  std::unordered_map<std::string, int64_t> offset;  // of each trainable gradient in the area
  // The device of each parameter at rest, which its gradient view takes: the CPU for a block
  // parameter under --offload params (the view is host memory like the parameter), else the
  // parameter's device (CUDA reads the pinned view in place).
  std::unordered_map<std::string, Device> rest;
  Device grad_device;  // where backward produces the gradients (set by the first one)
  int64_t bytes = 0;                                // the area's size
  int64_t bucket_bytes = 0;
  std::shared_ptr<Storage> area;  // pinned, taken at the first gradient, kept for the next steps
  bool armed = false;
  int64_t drained = 0;
  // Copies enqueued on the copy stream whose device gradients the compute stream may not reuse
  // yet. A marker is an event recorded on the copy stream after the gradients it covers were
  // freed (the engine frees each one after its hook returns, so the marker for a gradient is
  // recorded at the next hook): only such an event lets the caching allocator hand their memory
  // to the compute stream again (Note [Cross-stream reuse]).
  struct Marker {
    std::unique_ptr<Event> event;
    int64_t bytes = 0;
  };
  std::deque<Marker> markers;
  int64_t marked_bytes = 0;   // covered by the markers
  int64_t pending_bytes = 0;  // copied since the last marker

  void mark(Device d) {
    if (pending_bytes == 0) return;
    Marker m{std::make_unique<Event>(d), pending_bytes};
    {
      StreamGuard on_copy(kCopyStream);
      m.event->record();
    }
    marked_bytes += pending_bytes;
    pending_bytes = 0;
    markers.push_back(std::move(m));
  }

  // The compute stream waits for the oldest copies until at most `keep` bytes stay in flight.
  void wait_until(int64_t keep) {
    while (!markers.empty() && marked_bytes > keep) {
      markers.front().event->block_current_stream();
      marked_bytes -= markers.front().bytes;
      markers.pop_front();
    }
  }

  // A tensor of `param`'s device over the area (CUDA reads and writes pinned memory in place).
  Tensor view(const Tensor& param, int64_t off, Device device) const {
    auto impl = std::make_shared<TensorImpl>();
    impl->storage = area;
    impl->offset = off / int64_t(dtype_size(param.dtype()));
    impl->shape = param.shape();
    impl->strides = contiguous_strides(param.shape());
    impl->dtype = param.dtype();
    impl->device = device;
    return Tensor(impl);
  }

  void drain(Tensor& param, const std::string& name) {
    Tensor g = param.grad();
    // Undefined, or in the area already (a second armed backward without zero_grad added into it).
    if (!g.defined() || (area && g.storage() == area)) return;
    const Device d = g.device();
    LT_CHECK(g.is_contiguous() && g.dtype() == param.dtype(), "--offload optimizer: the gradient of '" + name + "'",
             "is not a contiguous gradient of the parameter's dtype", "report this: the engine made it");
    if (!area) {
      grad_device = d;
      MemoryCategoryScope cat(Category::Gradient);
      area = allocate_pinned_host(bytes, d);
      LT_CHECK(area != nullptr, "--offload optimizer: pinning " + std::to_string(bytes) + " bytes for the gradients",
               "the system refused to pin more host memory",
               "raise the locked-memory limit (ulimit -l), or train without --offload optimizer");
    }
    mark(d);  // the gradients drained before this one are freed by now
    wait_until(bucket_bytes);
    const int64_t off = offset.at(name);
    Event written(d);
    written.record();  // compute: the gradient holds its values
    {
      StreamGuard on_copy(kCopyStream);
      written.block_current_stream();
      if (!d.is_meta()) backend_for(d).copy_to_host_async(static_cast<char*>(area->data()) + off, g);
    }
    record_stream(g, kCopyStream);  // its memory is reused only after the copy
    pending_bytes += g.nbytes();
    param.set_grad(view(param, off, rest.at(name)));
    ++drained;
  }
};

OffloadOptimizer::~OffloadOptimizer() = default;

void OffloadOptimizer::drain_during_backward() {
  if (drain_) return;
  drain_ = std::make_shared<Drain>();
  drain_->bucket_bytes = opt_.bucket_bytes;
  std::weak_ptr<Drain> weak = drain_;
  for (auto& [name, p] : named_params()) {
    drain_->offset[name] = drain_->bytes;
    drain_->rest[name] = p.device();
    drain_->bytes += align64(p.nbytes());
    // An init-capture: clang 14 (the sanitizer and fuzz builds) cannot capture a structured binding.
    p.register_post_accumulate_grad_hook([weak, name = name](Tensor& param) {
      std::shared_ptr<Drain> d = weak.lock();
      if (d && d->armed) d->drain(param, name);
    });
  }
}

void OffloadOptimizer::set_draining(bool on) {
  if (drain_) drain_->armed = on;
}

void OffloadOptimizer::finish_backward() {
  if (!drain_) return;
  drain_->armed = false;
  if (!drain_->area) return;
  drain_->mark(drain_->grad_device);
  // The host waits too: gradient views of host-resting parameters are read by the CPU (the norm)
  // next, and the device's norm reads the rest right after anyway.
  if (!drain_->markers.empty()) drain_->markers.back().event->synchronize();
  drain_->wait_until(0);
}

int64_t OffloadOptimizer::drained() const { return drain_ ? drain_->drained : 0; }

bool OffloadOptimizer::is_drained(const Slot& s) const {
  return drain_ && drain_->area && s.param.grad().defined() && s.param.grad().storage() == drain_->area;
}

// Slots whose gradients are in the area: stepped bucket by bucket on the worker threads, each
// bucket copied back on the copy stream while the next one is stepped.
void OffloadOptimizer::update_drained(const std::vector<Slot*>& slots, float grad_scale) {
  Drain& dr = *drain_;
  const Device d = dr.grad_device;
  dr.mark(d);
  dr.wait_until(0);  // (finish_backward did this already when the trainer ran it)
  // The host writes the 16-bit results over the gradients: whatever the compute stream enqueued
  // that reads them (the norm, a loss scaler's check) must be done, and it is the last reader of
  // the parameters before the copies back.
  Event computed(d);
  computed.record();
  if (!d.is_meta()) computed.synchronize();
  Event returned(d);
  {
    StreamGuard on_copy(kCopyStream);
    computed.block_current_stream();
  }
  char* base = static_cast<char*>(dr.area->data());
  size_t i = 0;
  while (i < slots.size()) {
    size_t j = i;
    int64_t bytes = 0;
    while (j < slots.size() && (j == i || bytes + align64(slots[j]->param.nbytes()) <= opt_.bucket_bytes))
      bytes += align64(slots[j++]->param.nbytes());
    if (!d.is_meta())
      for (size_t k = i; k < j; ++k) {
        Slot& s = *slots[k];
        char* at = base + dr.offset.at(s.name);
        step_one(s, at, s.param.dtype() != DType::F32 ? at : nullptr, grad_scale, nullptr);
      }
    StreamGuard on_copy(kCopyStream);
    for (size_t k = i; k < j; ++k) {
      Slot& s = *slots[k];
      const void* src = s.param.dtype() == DType::F32 ? s.state.back().data<float>()
                                                       : static_cast<const void*>(base + dr.offset.at(s.name));
      if (d.is_meta()) continue;
      if (s.param.device() == d) backend_for(d).copy_from_host_async(s.param, src);
      else std::memcpy(s.param.raw_data(), src, size_t(s.param.nbytes()));  // it rests in host memory
    }
    returned.record();
    i = j;
  }
  returned.block_current_stream();  // compute (the next forward) runs after the copies back
}

}  // namespace lt::offload
