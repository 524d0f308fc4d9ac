#include "train/param_offload.h"

#include <memory>

#include "backend/backend.h"
#include "backend/event.h"
#include "leantrain/autograd.h"
#include "leantrain/error.h"
#include "leantrain/memory.h"
#include "leantrain/ops.h"
#include "offload/offload_trace.h"

namespace lt {

namespace {

// The device where parameters rest between uses: the CPU for a GPU run; cpu and meta keep their
// own device (meta has no host memory to point at; on cpu they are the same place).
Device rest_device(Device d) { return d.is_cuda() ? Device::cpu() : d; }

struct BlockParams {
  std::vector<Tensor> params;                  // handles to the model's parameters (shared impls)
  std::vector<std::shared_ptr<Storage>> home;  // pinned, one per parameter
  std::vector<Tensor> on_device;               // while fetched: the device copies
  std::unique_ptr<Event> copied;               // on the copy stream, after the copies
  bool in = false;                             // the parameters point at the device copies
};

struct ParamOffloader {
  Device device;
  std::vector<BlockParams> blocks;

  // Starts the copies of block i (once until it is released): fresh device memory from the
  // compute stream's pool, written on the copy stream after the compute work enqueued so far
  // (that memory's earlier users).
  void fetch(size_t i) {
    if (i >= blocks.size()) return;
    BlockParams& b = blocks[i];
    if (!b.on_device.empty() || b.params.empty()) return;
    MemoryCategoryScope cat(Category::Parameter);
    OpNameScope op("offload_param_fetch");
    for (const Tensor& p : b.params) b.on_device.push_back(Tensor::empty(p.shape(), p.dtype(), device));
    Event before(device);
    before.record();
    StreamGuard on_copy(kCopyStream);
    before.block_current_stream();
    for (size_t k = 0; k < b.params.size(); ++k)
      if (!device.is_meta()) backend_for(device).copy_from_host_async(b.on_device[k], b.home[k]->data());
    b.copied = std::make_unique<Event>(device);
    b.copied->record();
  }

  // Block i's parameters on the device for the compute stream, block `next` on its way.
  void use(size_t i, size_t next) {
    BlockParams& b = blocks[i];
    fetch(i);
    if (!b.in && !b.params.empty()) {
      offload::trace_device_wait(*b.copied, offload::Phase::FetchWait);  // (LEANTRAIN_OFFLOAD_TRACE=1 only)
      b.copied->block_current_stream();
      for (size_t k = 0; k < b.params.size(); ++k) {
        TensorImpl* impl = b.params[k].impl();
        impl->storage = b.on_device[k].storage();
        impl->offset = 0;
        impl->device = device;
      }
      b.in = true;
    }
    fetch(next);
  }

  // Back to the homes; the device copies are freed (the compute stream, their pool's, already
  // waited for the copy that wrote them).
  void release(size_t i) {
    BlockParams& b = blocks[i];
    if (!b.in) return;
    for (size_t k = 0; k < b.params.size(); ++k) {
      TensorImpl* impl = b.params[k].impl();
      impl->storage = b.home[k];
      impl->offset = 0;
      impl->device = rest_device(device);
    }
    b.on_device.clear();
    b.copied.reset();
    b.in = false;
  }
};

// The parameter's values into a pinned home; the parameter then rests there.
std::shared_ptr<Storage> move_home(Tensor& p, Device device, Category category = Category::Parameter) {
  LT_CHECK(p.is_contiguous() && p.device() == device, "--offload params: parameter of " + shape_str(p.shape()),
           "is not a contiguous tensor on the run's device", "report this: the model made it");
  std::shared_ptr<Storage> home;
  {
    MemoryCategoryScope cat(category);
    home = allocate_pinned_host(p.nbytes(), device);
  }
  LT_CHECK(home != nullptr, "--offload params: pinning " + std::to_string(p.nbytes()) + " bytes for a parameter",
           "the system refused to pin more host memory",
           "raise the locked-memory limit (ulimit -l), or train without --offload params");
  if (!device.is_meta()) backend_for(device).copy_to_host(home->data(), p);
  TensorImpl* impl = p.impl();
  impl->storage = home;
  impl->offset = 0;
  impl->device = rest_device(device);
  return home;
}

}  // namespace

std::vector<std::string> offload_block_parameters(nn::Module& root, Device device) {
  auto off = std::make_shared<ParamOffloader>();
  off->device = device;
  std::vector<std::string> paths;
  std::vector<nn::Module*> modules;
  for (auto& [path, m] : root.named_modules()) {
    if (!m->forward_wrapper() || path.empty()) continue;
    bool inside = false;  // a wrapped module inside one already taken moves with it
    for (const std::string& p : paths)
      if (path.rfind(p + ".", 0) == 0) inside = true;
    if (inside) continue;
    paths.push_back(path);
    modules.push_back(m);
  }
  for (nn::Module* m : modules) {
    BlockParams b;
    for (auto& [name, t] : m->named_parameters()) {
      b.params.push_back(t);
      b.home.push_back(move_home(b.params.back(), device));
    }
    off->blocks.push_back(std::move(b));
  }
  // The parameters that stay on the device get storages of their own: the model built all its
  // parameters in one buffer (the parameter store), which would otherwise stay whole on the
  // device. They go through host memory, so the device never holds more than that buffer.
  // Buffers (a RoPE table, a mask) may be views of the same store: they move out and back too.
  std::vector<std::pair<Tensor, std::shared_ptr<Storage>>> staying;
  auto stays = [&](const Tensor& t) {
    return t.defined() && t.device() == device && t.is_contiguous() && t.storage()->nbytes() != t.nbytes();
  };
  for (auto& [name, t] : root.named_parameters())
    if (stays(t)) staying.push_back({t, nullptr});
  for (auto& [name, t] : root.named_buffers())
    if (stays(t)) staying.push_back({t, nullptr});
  std::vector<Category> categories;
  for (auto& [t, host] : staying) {
    categories.push_back(t.category());
    host = move_home(t, device, categories.back());
  }
  for (size_t k = 0; k < staying.size(); ++k) {  // the store is freed by now
    auto& [t, host] = staying[k];
    Tensor own;
    {
      MemoryCategoryScope cat(categories[k]);
      own = Tensor::empty(t.shape(), t.dtype(), device);
    }
    if (!device.is_meta()) backend_for(device).copy_from_host(own, host->data());
    TensorImpl* impl = t.impl();
    impl->storage = own.storage();
    impl->offset = 0;
    impl->device = device;
  }
  for (size_t i = 0; i < modules.size(); ++i) {
    nn::Module::ForwardWrapper inner = modules[i]->forward_wrapper();
    modules[i]->set_forward_wrapper([off, inner, i](nn::Module& self, const Tensor& x, const nn::Module::ForwardFn& f) {
      off->use(i, i + 1);
      Tensor out;
      try {
        out = inner(self, x, f);
      } catch (...) {
        off->release(i);
        throw;
      }
      off->release(i);
      if (out.grad_fn()) {
        // Backward, in reverse: this block back before its recomputation, the one before it on its
        // way; back home after the node.
        std::weak_ptr<ParamOffloader> w = off;
        out.grad_fn()->register_pre_hook([w, i](Node&, Tensor&) {
          if (auto o = w.lock()) o->use(i, i == 0 ? o->blocks.size() : i - 1);
        });
        out.grad_fn()->register_post_hook([w, i](Node&, std::vector<Tensor>&, const Tensor&) {
          if (auto o = w.lock()) o->release(i);
        });
      }
      return out;
    });
  }
  return paths;
}

}  // namespace lt
