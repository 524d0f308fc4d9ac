#include <cstdio>

#include "leantrain/error.h"
#include "leantrain/memory.h"

namespace lt {

static std::string format_bytes(int64_t b) {
  char buf[64];
  double v = double(b);
  if (v >= 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.2f GiB", v / (1024.0 * 1024 * 1024));
  else if (v >= 1024.0 * 1024) std::snprintf(buf, sizeof buf, "%.2f MiB", v / (1024.0 * 1024));
  else if (v >= 1024.0) std::snprintf(buf, sizeof buf, "%.1f KiB", v / 1024.0);
  else std::snprintf(buf, sizeof buf, "%lld B", (long long)b);
  return buf;
}

Block Allocator::allocate(int64_t nbytes) {
  std::lock_guard<std::mutex> g(mu_);
  Block b;
  b.requested = nbytes;
  b.size = round_allocation(nbytes);
  b.category = current_category();
  if (!do_allocate(b)) {
    ++stats_.num_ooms;
    record(MemoryEvent::Action::Oom, 0, b.size, nbytes, b.category, b.stream);
    std::string detail = "asked for " + format_bytes(b.size) + " (" + category_name(b.category) + ", op '" +
                         current_op() + "'), " + format_bytes(stats_.allocated_bytes.current) + " allocated, " +
                         format_bytes(stats_.reserved_bytes.current) + " reserved";
    std::string cats;
    for (int i = 0; i < kNumCategories; ++i) {
      if (!stats_.category[i].current) continue;
      cats += std::string(cats.empty() ? "" : ", ") + category_name(Category(i)) + " " +
              format_bytes(stats_.category[i].current);
    }
    throw OutOfMemoryError("out of memory on " + device_.str(), detail + "; by category: " + cats,
                           "run `leantrain plan` with --budget to find a configuration that fits");
  }
  stats_.allocated_bytes.increase(b.size);
  stats_.requested_bytes.increase(nbytes);
  stats_.category[int(b.category)].increase(b.size);
  ++stats_.num_allocs;
  record(MemoryEvent::Action::Alloc, b.addr, b.size, nbytes, b.category, b.stream);
  return b;
}

void Allocator::deallocate(const Block& b) {
  std::lock_guard<std::mutex> g(mu_);
  stats_.allocated_bytes.decrease(b.size);
  stats_.requested_bytes.decrease(b.requested);
  stats_.category[int(b.category)].decrease(b.size);
  ++stats_.num_frees;
  record(MemoryEvent::Action::Free, b.addr, b.size, b.requested, b.category, b.stream);
  do_free(b);
}

void Allocator::retag(Block& b, Category to) {
  std::lock_guard<std::mutex> g(mu_);
  if (b.category == to) return;
  stats_.category[int(b.category)].decrease(b.size);
  stats_.category[int(to)].increase(b.size);
  b.category = to;
}

void Allocator::note_segment_alloc(uint64_t addr, int64_t size) {
  stats_.reserved_bytes.increase(size);
  ++stats_.num_segments;
  record(MemoryEvent::Action::SegmentAlloc, addr, size, size, current_category(), 0);
}

void Allocator::note_segment_free(uint64_t addr, int64_t size) {
  stats_.reserved_bytes.decrease(size);
  --stats_.num_segments;
  record(MemoryEvent::Action::SegmentFree, addr, size, size, Category::Other, 0);
}

MemoryStats Allocator::stats() const {
  std::lock_guard<std::mutex> g(mu_);
  return stats_;
}

void Allocator::reset_peak_stats() {
  std::lock_guard<std::mutex> g(mu_);
  stats_.allocated_bytes.reset_peak();
  stats_.reserved_bytes.reset_peak();
  stats_.requested_bytes.reset_peak();
  for (auto& c : stats_.category) c.reset_peak();
}

void Allocator::set_history(bool on) {
  std::lock_guard<std::mutex> g(mu_);
  history_on_ = on;
}

std::vector<MemoryEvent> Allocator::history() const {
  std::lock_guard<std::mutex> g(mu_);
  return history_;
}

void Allocator::clear_history() {
  std::lock_guard<std::mutex> g(mu_);
  history_.clear();
}

std::string Allocator::breakdown() const {
  std::lock_guard<std::mutex> g(mu_);
  std::string s;
  for (int i = 0; i < kNumCategories; ++i) {
    s += std::string(category_name(Category(i))) + ": " + format_bytes(stats_.category[i].current) + " (peak " +
         format_bytes(stats_.category[i].peak) + ")\n";
  }
  return s;
}

void Allocator::record(MemoryEvent::Action a, uint64_t addr, int64_t size, int64_t requested, Category c,
                       int stream) {
  if (history_on_) history_.push_back({a, addr, size, requested, c, stream, current_op()});
}

Storage::~Storage() {
  if (allocator) allocator->deallocate(block);
}

std::shared_ptr<Storage> allocate_storage(int64_t nbytes, Device d) {
  Allocator& a = allocator_for(d);
  return std::make_shared<Storage>(a.allocate(nbytes), &a, d);
}

}  // namespace lt
