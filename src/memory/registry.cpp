#include <map>
#include <mutex>

#include "leantrain/error.h"
#include "memory/host_allocators.h"

namespace lt {

// Defined by the CUDA backend (or its stub when built without CUDA).
std::unique_ptr<Allocator> make_cuda_allocator(int device_index);
std::unique_ptr<Allocator> make_cuda_pinned_allocator(int device_index);

namespace {
std::mutex g_mu;
using Table = std::map<std::pair<int, int>, std::unique_ptr<Allocator>>;
Table& table() {
  static auto* t = new Table();  // never destroyed: tensors may outlive main
  return *t;
}
Table& pinned_table() {
  static auto* t = new Table();
  return *t;
}
Table& disk_table() {
  static auto* t = new Table();
  return *t;
}
std::pair<int, int> key(Device d) { return {int(d.type), d.index}; }

// d's allocator in `t`, made by `make(d)` on first use.
template <class Make>
Allocator& get_or_make(Table& t, Device d, Make make) {
  std::lock_guard<std::mutex> g(g_mu);
  auto it = t.find(key(d));
  if (it != t.end()) return *it->second;
  std::unique_ptr<Allocator> a = make(d);
  Allocator& ref = *a;
  t.emplace(key(d), std::move(a));
  return ref;
}
}  // namespace

Allocator& allocator_for(Device d) {
  return get_or_make(table(), d, [](Device d) -> std::unique_ptr<Allocator> {
    switch (d.type) {
      case DeviceType::CPU: return std::make_unique<CpuAllocator>();
      case DeviceType::Meta: return std::make_unique<MetaAllocator>();
      case DeviceType::CUDA: return make_cuda_allocator(d.index);
    }
    return nullptr;
  });
}

static void replace_in(Table& t, Device d, std::unique_ptr<Allocator> a) {
  auto it = t.find(key(d));
  if (it != t.end()) {
    LT_CHECK(it->second->stats().allocated_bytes.current == 0, "cannot replace the allocator of " + d.str(),
             "tensors are still allocated on it", "free them first");
    // Keep the old one alive: storages hold raw pointers to their allocator.
    static std::vector<std::unique_ptr<Allocator>> graveyard;
    graveyard.push_back(std::move(it->second));
    it->second = std::move(a);
  } else {
    t.emplace(key(d), std::move(a));
  }
}

void set_allocator(Device d, std::unique_ptr<Allocator> a) {
  std::lock_guard<std::mutex> g(g_mu);
  replace_in(table(), d, std::move(a));
}

Allocator& pinned_host_allocator(Device d) {
  return get_or_make(pinned_table(), d, [](Device d) {
    return d.is_cuda() ? make_cuda_pinned_allocator(d.index) : make_host_pinned_allocator(d);
  });
}

void set_pinned_host_allocator(Device d, std::unique_ptr<Allocator> a) {
  std::lock_guard<std::mutex> g(g_mu);
  replace_in(pinned_table(), d, std::move(a));
}

Allocator& disk_allocator(Device d) {
  return get_or_make(disk_table(), d, [](Device d) -> std::unique_ptr<Allocator> {
    return std::make_unique<DiskAccountAllocator>(d);
  });
}

void set_disk_allocator(Device d, std::unique_ptr<Allocator> a) {
  std::lock_guard<std::mutex> g(g_mu);
  replace_in(disk_table(), d, std::move(a));
}

}  // namespace lt
