// --offload optimizer's gradients moved to the host during backward, and the update that reads
// them there (offload_optimizer.h, "Draining during backward"; docs/decisions.md).
//
// Every choice below follows program order, never timing, so cpu (plain copies), meta (no copies)
// and cuda take the same memory in the same order and `leantrain plan` predicts the device and the
// pinned-host peaks of a run.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "backend/backend.h"
#include "backend/dry_compute.h"
#include "backend/event.h"
#include "leantrain/error.h"
#include "leantrain/ops.h"
#include "offload/offload_optimizer.h"
#include "offload/disk_state.h"
#include "offload/offload_trace.h"

namespace lt::offload {

namespace {

int64_t drain_align64(int64_t b) { return (b + 63) / 64 * 64; }

}  // namespace

struct OffloadOptimizer::Drain {
  std::unordered_map<std::string, int64_t> offset;  // of each trainable gradient in the area
  Device grad_device;  // where backward produces the gradients (set by the first one)
  int64_t bytes = 0;                                // the area's size
  int64_t bucket_bytes = 0;
  std::shared_ptr<Storage> area;  // pinned, taken at the first gradient, kept for the next steps
  bool armed = false;
  int64_t drained = 0, stepped_early = 0;
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

  // Early steps (set_early_step): buckets of landed gradients stepped by a host thread while
  // backward goes on, the 16-bit results into `staging` (the gradients stay for the norm).
  struct Landed {
    std::vector<std::string> names;
    std::unique_ptr<Event> event;  // on the copy stream, after their copies
  };
  OffloadOptimizer* owner = nullptr;
  bool early = false;
  std::shared_ptr<Storage> staging;                       // pinned, beside the area
  std::unordered_map<std::string, Slot*> slots;           // filled by update(): states exist
  // Filled by update() too (parameters at rest): the memory of each parameter that lives in host
  // memory (a cpu run, or a block parameter resting in its pinned home under --offload params),
  // where its step writes the result directly. Taken there and not from the parameter during
  // backward, where --offload params has switched a block's parameters to their device copies.
  std::unordered_map<std::string, void*> host_param;
  std::vector<std::string> filling;                       // names copied since the last bucket
  int64_t filling_bytes = 0;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Landed> queue;
  bool busy = false, stop = false;
  // Set once backward has ended (finish_backward, the update): the trainer's thread then only
  // waits, so the stepping thread takes every core instead of leaving it one.
  std::atomic<bool> backward_done{false};
  std::unordered_set<std::string> stepped;   // this step's, by the thread
  std::unordered_set<std::string> returned;  // of those, copied back to the device by the thread
  std::exception_ptr error;
  std::thread worker;

  ~Drain() {
    {
      std::lock_guard<std::mutex> lk(mu);
      stop = true;
    }
    cv.notify_all();
    if (worker.joinable()) worker.join();
  }

  // The gradients copied since the last bucket become one, stepped once their copies land.
  void close_bucket(Device d) {
    if (filling.empty()) return;
    Landed b{std::move(filling), std::make_unique<Event>(d)};
    filling.clear();
    filling_bytes = 0;
    {
      StreamGuard on_copy(kCopyStream);
      b.event->record();
    }
    {
      std::lock_guard<std::mutex> lk(mu);
      queue.push_back(std::move(b));
    }
    if (!worker.joinable()) worker = std::thread([this] { work(); });
    backward_done = false;  // a bucket closed during backward (finish_backward sets it after its own)
    cv.notify_all();
  }

  void work() {
    for (;;) {
      Landed b;
      {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return stop || !queue.empty(); });
        if (queue.empty()) return;
        b = std::move(queue.front());
        queue.pop_front();
        busy = true;
      }
      try {
        const bool meta = b.event->device().is_meta();
        if (!meta) b.event->synchronize();
        const double t0 = trace_on() ? trace_now_ms() : 0;
        char* g = static_cast<char*>(area->data());
        char* out = static_cast<char*>(staging->data());
        std::vector<Slot*> back;  // stepped device parameters: copied back below, in one go
        for (const std::string& n : b.names) {
          auto it = slots.find(n);
          if (it == slots.end()) continue;  // no state yet (the first step): update() steps it
          Slot& sl = *it->second;
          const int64_t off = offset.at(n);
          const bool wide = sl.param.dtype() == DType::F32;
          void* host = host_param.at(n);
          // One core fewer while backward goes on: the thread that enqueues its kernels must not wait
          // for a core. (Any thread count gives the same bits.)
          if (!meta) {
            owner->step_one(sl, g + off, wide ? nullptr : host ? host : out + off, 1.0f, nullptr,
                            backward_done ? owner->threads_ : std::max(1, owner->threads_ - 1));
            if (wide && host) std::memcpy(host, sl.state.back().data<float>(), size_t(sl.param.nbytes()));
            if (!host) back.push_back(&sl);
          }
          std::lock_guard<std::mutex> lk(mu);
          stepped.insert(n);
        }
        // The results go back at once instead of waiting for update(): the copy stream runs them
        // after the gradients' copies, which came after every use of these parameters in this
        // backward (a parameter's hook runs once its gradient is complete, tied ones included).
        if (!back.empty()) {
          StreamGuard on_copy(kCopyStream);
          for (Slot* sl : back) {
            const void* src = sl->param.dtype() == DType::F32 ? static_cast<const void*>(sl->state.back().data<float>())
                                                              : out + offset.at(sl->name);
            backend_for(grad_device).copy_from_host_async(sl->param, src);
          }
          std::lock_guard<std::mutex> lk(mu);
          for (Slot* sl : back) returned.insert(sl->name);
        }
        if (trace_on()) trace_add(Phase::EarlySteps, trace_now_ms() - t0);
      } catch (...) {
        std::lock_guard<std::mutex> lk(mu);
        if (!error) error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lk(mu);
        busy = false;
      }
      cv.notify_all();
    }
  }

  // Until the thread has stepped every bucket handed to it; its error, if any, thrown here.
  void wait_idle() {
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return queue.empty() && !busy; });
    if (error) {
      std::exception_ptr e = error;
      error = nullptr;
      std::rethrow_exception(e);
    }
  }

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
      if (trace_on() && markers.front().event->asynchronous()) trace_device_wait(*markers.front().event, Phase::DrainWait);
      markers.front().event->block_current_stream();
      marked_bytes -= markers.front().bytes;
      markers.pop_front();
    }
  }

  // A tensor of `param`'s device over the area (CUDA reads and writes pinned memory in place).
  Tensor view(const Tensor& param, int64_t off, Device device) const {
    return tensor_over(area, off / int64_t(dtype_size(param.dtype())), param.shape(), contiguous_strides(param.shape()),
                       param.dtype(), device);
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
      if (early) {
        MemoryCategoryScope ws(Category::Workspace);
        staging = allocate_pinned_host(bytes, d);
        LT_CHECK(staging != nullptr, "--offload optimizer: pinning " + std::to_string(bytes) + " bytes for the results",
                 "the system refused to pin more host memory",
                 "raise the locked-memory limit (ulimit -l), or train without --offload optimizer");
      }
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
    // A tensor of the gradient's device also for a block parameter resting in host memory under
    // --offload params: the norm then runs as one device kernel over every slot, as without
    // offload (a CPU view would put 1B elements through the CPU backend's one-thread sum).
    param.set_grad(view(param, off, d));
    ++drained;
    if (early) {
      filling.push_back(name);
      filling_bytes += drain_align64(param.nbytes());
      if (filling_bytes >= bucket_bytes) close_bucket(d);
    }
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
    drain_->bytes += drain_align64(p.nbytes());
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

void OffloadOptimizer::set_early_step(bool on) {
  LT_CHECK(drain_ && !drain_->area, "--offload optimizer: early steps switched on late",
           "they need draining on and the result buffer taken with the gradient area",
           "call set_early_step after drain_during_backward and before the first backward");
  drain_->early = on;
  drain_->owner = this;
}

void OffloadOptimizer::finish_backward() {
  if (!drain_) return;
  drain_->armed = false;
  if (!drain_->area) return;
  if (drain_->early) {
    drain_->close_bucket(drain_->grad_device);
    drain_->backward_done = true;
  }
  drain_->mark(drain_->grad_device);
  // The host waits too: gradient views of host-resting parameters are read by the CPU (the norm)
  // next, and the device's norm reads the rest right after anyway.
  if (!drain_->markers.empty()) drain_->markers.back().event->synchronize();
  drain_->wait_until(0);
}

int64_t OffloadOptimizer::drained() const { return drain_ ? drain_->drained : 0; }

int64_t OffloadOptimizer::stepped_early() const { return drain_ ? drain_->stepped_early : 0; }

bool OffloadOptimizer::is_drained(const Slot& s) const {
  return drain_ && drain_->area && s.param.grad().defined() && s.param.grad().storage() == drain_->area;
}

// Slots whose gradients are in the area: stepped bucket by bucket on the worker threads, each
// bucket copied back on the copy stream while the next one is stepped.
void OffloadOptimizer::update_drained(const std::vector<Slot*>& slots, float grad_scale) {
  Drain& dr = *drain_;
  const Device d = dr.grad_device;
  std::unordered_set<std::string> early;     // stepped during backward: at most their copies back remain
  std::unordered_set<std::string> returned;  // stepped and copied back during backward
  if (dr.early) {
    dr.close_bucket(d);
    dr.backward_done = true;
    const double t0 = trace_on() ? trace_now_ms() : 0;
    dr.wait_idle();
    if (trace_on()) trace_add(Phase::EarlyWait, trace_now_ms() - t0);
    std::lock_guard<std::mutex> lk(dr.mu);
    for (Slot* s : slots)
      if (dr.stepped.erase(s->name)) early.insert(s->name);
    for (Slot* s : slots)
      if (dr.returned.erase(s->name)) returned.insert(s->name);
    LT_CHECK(early.empty() || grad_scale == 1.0f, "--offload optimizer: a step with gradient scale " +
             std::to_string(grad_scale) + " after early steps", "the early steps assumed no clipping and no loss scaling",
             "report this: the trainer switched early steps on");
    dr.stepped_early += int64_t(early.size());
  }
  // A parameter in host memory takes its result directly (host_param).
  auto host_of = [&](const Slot& s) -> void* {
    return !d.is_meta() && s.param.device().is_cpu() ? s.param.raw_data() : nullptr;
  };
  for (Slot* s : slots) dr.host_param[s->name] = host_of(*s);
  for (Slot* s : slots) dr.slots[s->name] = s;  // their states exist now: the next steps go early
  dr.mark(d);
  dr.wait_until(0);  // (finish_backward did this already when the trainer ran it)
  // The host writes the 16-bit results over the gradients: whatever the compute stream enqueued
  // that reads them (the norm, a loss scaler's check) must be done, and it is the last reader of
  // the parameters before the copies back.
  Event computed(d);
  computed.record();
  if (!d.is_meta()) {
    const double t0 = trace_on() ? trace_now_ms() : 0;
    computed.synchronize();
    if (trace_on()) trace_add(Phase::DeviceWait, trace_now_ms() - t0);
  }
  Event back(d);
  {
    StreamGuard on_copy(kCopyStream);
    computed.block_current_stream();
  }
  char* base = static_cast<char*>(dr.area->data());
  size_t i = 0;
  while (i < slots.size()) {
    size_t j = i;
    int64_t bytes = 0;
    while (j < slots.size() && (j == i || bytes + drain_align64(slots[j]->param.nbytes()) <= opt_.bucket_bytes))
      bytes += drain_align64(slots[j++]->param.nbytes());
    const double t0 = trace_on() ? trace_now_ms() : 0;
    // (A dry step, Note [Dry compute], steps nothing; its copies back go to the meta backend.)
    if (!d.is_meta() && !DryCompute::active())
      for (size_t k = i; k < j; ++k) {
        Slot& s = *slots[k];
        if (early.count(s.name)) continue;
        char* at = base + dr.offset.at(s.name);
        void* host = host_of(s);
        const bool wide = s.param.dtype() == DType::F32;
        step_one(s, at, wide ? nullptr : host ? host : at, grad_scale, nullptr);
        if (wide && host) std::memcpy(host, s.state.back().data<float>(), size_t(s.param.nbytes()));
      }
    if (trace_on()) trace_add(Phase::LateSteps, trace_now_ms() - t0);
    StreamGuard on_copy(kCopyStream);
    for (size_t k = i; k < j; ++k) {
      Slot& s = *slots[k];
      if (d.is_meta() || host_of(s) || returned.count(s.name)) continue;
      char* from = early.count(s.name) ? static_cast<char*>(dr.staging->data()) : base;
      const void* src = s.param.dtype() == DType::F32 ? s.state.back().data<float>()
                                                       : static_cast<const void*>(from + dr.offset.at(s.name));
      backend_for(d).copy_from_host_async(s.param, src);
    }
    back.record();
    i = j;
  }
  back.block_current_stream();  // compute (the next forward) runs after the copies back
  if (trace_on() && back.asynchronous()) trace_device_wait(back, Phase::CopyBackWait);
  trace_mark();
}

}  // namespace lt::offload
