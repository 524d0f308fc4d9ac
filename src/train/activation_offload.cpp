#include "train/activation_offload.h"

#include <map>
#include <memory>

#include "backend/backend.h"
#include "backend/event.h"
#include "leantrain/autograd.h"
#include "leantrain/error.h"
#include "leantrain/memory.h"

namespace lt {

namespace {

// Pinned host buffers of one run, by size: a buffer goes back here when the tensor it held has
// been used by its backward, and the next step's forward takes it again. Its last use (the copy
// back to the device) and its next one (the copy from the device) are both on the copy stream,
// so the stream's order alone makes the reuse safe.
struct HostPool {
  std::multimap<int64_t, std::shared_ptr<Storage>> free;

  std::shared_ptr<Storage> take(int64_t nbytes, Device d) {
    auto it = free.find(nbytes);
    if (it != free.end()) {
      std::shared_ptr<Storage> s = std::move(it->second);
      free.erase(it);
      return s;
    }
    MemoryCategoryScope cat(Category::Activation);
    return allocate_pinned_host(nbytes, d);
  }
};

struct Unit;

// One tensor a checkpointed region saved: its bytes on the host, and between the fetch and the
// unpack its copy back on the device.
struct Entry {
  std::shared_ptr<Unit> unit;  // keeps the unit (and its link to the one before) alive with its tensors
  std::shared_ptr<HostPool> pool;
  std::shared_ptr<Storage> host;
  Shape shape;
  DType dtype = DType::F32;
  Device device;
  Tensor kept;     // no pinned memory was to be had: the tensor stays where it was
  Tensor fetched;  // on the device, written by the copy stream
  std::unique_ptr<Event> copied;  // on the copy stream, after the copy into `fetched`

  Entry() = default;
  Entry(const Entry&) = delete;
  Entry& operator=(const Entry&) = delete;

  ~Entry() {
    try {
      // Fetched but never unpacked (the graph went without its backward): the compute stream may
      // reuse the memory only after the copy into it.
      if (fetched.defined() && copied) copied->block_current_stream();
      fetched = Tensor();
      copied.reset();
    } catch (...) {  // the device is gone: nothing left to order
    }
    if (host && pool) pool->free.emplace(host->nbytes(), std::move(host));
  }

  // Starts the copy back (once): fresh device memory from the compute stream's pool, written on
  // the copy stream after the compute work enqueued so far (that memory's earlier users).
  void fetch() {
    if (kept.defined() || fetched.defined()) return;
    MemoryCategoryScope cat(Category::Activation);
    OpNameScope op("offload_fetch");
    fetched = Tensor::empty(shape, dtype, device);
    Event before(device);
    before.record();
    StreamGuard on_copy(kCopyStream);
    before.block_current_stream();
    backend_for(device).copy_from_host_async(fetched, host->data());
    copied = std::make_unique<Event>(device);
    copied->record();
  }

  // The recomputation needs it: the compute stream waits for the copy. The device copy is handed
  // over (freed when the recomputation is done with it); a retained graph fetches again.
  Tensor take() {
    if (kept.defined()) return kept;
    fetch();
    copied->block_current_stream();
    copied.reset();
    return std::move(fetched);
  }
};

struct Unit {
  std::vector<std::weak_ptr<Entry>> entries;
  std::weak_ptr<Unit> prev;  // the unit whose forward ran just before: its backward runs next

  void fetch() {
    for (auto& w : entries)
      if (std::shared_ptr<Entry> e = w.lock()) e->fetch();
  }
};

struct Offloader {
  std::shared_ptr<HostPool> pool = std::make_shared<HostPool>();
  std::weak_ptr<Unit> last;  // the unit created last (expired once its tensors were used)
};

using EntryPtr = std::shared_ptr<Entry>;

// The pack hook's work for one saved tensor of `unit`.
EntryPtr offload(const Tensor& saved, const std::shared_ptr<Unit>& unit, const std::shared_ptr<HostPool>& pool) {
  const Device d = saved.device();
  auto e = std::make_shared<Entry>();
  e->unit = unit;
  e->pool = pool;
  e->shape = saved.shape();
  e->dtype = saved.dtype();
  e->device = d;
  unit->entries.push_back(e);
  Tensor src = saved.is_contiguous() ? saved : saved.contiguous();
  e->host = pool->take(src.nbytes(), d);
  if (!e->host) {  // the system pins no more: this tensor stays on the device
    e->kept = src;
    return e;
  }
  // The compute stream goes on only after the copies enqueued so far (the previous unit's): the
  // memory freed since they were enqueued may then be reused (Note [Cross-stream reuse]).
  Event copies(d);
  {
    StreamGuard on_copy(kCopyStream);
    copies.record();
  }
  copies.block_current_stream();
  Event written(d);
  written.record();  // compute: src holds its values
  {
    StreamGuard on_copy(kCopyStream);
    written.block_current_stream();
    backend_for(d).copy_to_host_async(e->host->data(), src);
  }
  record_stream(src, kCopyStream);  // its memory is reused only after the copy
  return e;
}

}  // namespace

void offload_checkpointed_modules(nn::Module& root, const std::vector<std::string>& paths) {
  auto off = std::make_shared<Offloader>();
  for (const std::string& path : paths) {
    nn::Module* m = root.find_module(path);
    LT_CHECK(m && m->forward_wrapper(), "--offload-activations: module '" + path + "' is not checkpointed",
             "only what a checkpointed module keeps for its recomputation is offloaded", "checkpoint it with --checkpoint");
    nn::Module::ForwardWrapper checkpointed = m->forward_wrapper();
    m->set_forward_wrapper([off, checkpointed](nn::Module& self, const Tensor& x, const nn::Module::ForwardFn& forward) {
      std::shared_ptr<Unit> unit;  // made at the first tensor saved: an eval forward saves none
      Tensor out;
      {
        SavedTensorHooksScope hooks(
            [&unit, &off](const Tensor& saved) -> PackedTensor {
              if (!unit) {
                unit = std::make_shared<Unit>();
                unit->prev = off->last;
                off->last = unit;
              }
              return offload(saved, unit, off->pool);
            },
            [](const PackedTensor& packed) { return std::any_cast<const EntryPtr&>(packed)->take(); });
        out = checkpointed(self, x, forward);
      }
      if (unit && out.grad_fn()) {
        // When this unit's backward starts: its tensors (unless already coming) and, one ahead, the
        // previous unit's.
        std::weak_ptr<Unit> w = unit;
        out.grad_fn()->register_pre_hook([w](Node&, Tensor&) {
          if (std::shared_ptr<Unit> u = w.lock()) {
            u->fetch();
            if (std::shared_ptr<Unit> p = u->prev.lock()) p->fetch();
          }
        });
      }
      return out;
    });
  }
}

}  // namespace lt
