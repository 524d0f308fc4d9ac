#include <chrono>
#include <cstdio>

#include "leantrain/error.h"
#include "leantrain/memory.h"
#include "memory/format_bytes.h"

namespace lt {

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
    const std::string where = kind_ == MemoryKind::Device ? "out of memory on " + device_.str()
                                                          : std::string("out of ") + memory_kind_name(kind_) +
                                                                " memory for " + device_.str();
    throw OutOfMemoryError(where, detail + "; by category: " + cats,
                           "run `leantrain plan` with --budget to find a configuration that fits");
  }
  stats_.allocated_bytes.increase(b.size);
  stats_.requested_bytes.increase(nbytes);
  stats_.category[int(b.category)].increase(b.size);
  ++stats_.num_allocs;
  live_[b.addr] = LiveBlock{b.addr, b.size, nbytes, b.category, b.stream, current_op()};
  record(MemoryEvent::Action::Alloc, b.addr, b.size, nbytes, b.category, b.stream);
  return b;
}

void Allocator::deallocate(const Block& b) {
  std::lock_guard<std::mutex> g(mu_);
  stats_.allocated_bytes.decrease(b.size);
  stats_.requested_bytes.decrease(b.requested);
  stats_.category[int(b.category)].decrease(b.size);
  ++stats_.num_frees;
  live_.erase(b.addr);
  record(MemoryEvent::Action::Free, b.addr, b.size, b.requested, b.category, b.stream);
  do_free(b);
}

void Allocator::retag(Block& b, Category to) {
  std::lock_guard<std::mutex> g(mu_);
  if (b.category == to) return;
  stats_.category[int(b.category)].decrease(b.size);
  stats_.category[int(to)].increase(b.size);
  record(MemoryEvent::Action::Retag, b.addr, b.size, b.requested, to, b.stream, b.category);
  if (auto it = live_.find(b.addr); it != live_.end()) it->second.category = to;
  b.category = to;
}

void Allocator::note_segment_alloc(uint64_t addr, int64_t size, int stream) {
  stats_.reserved_bytes.increase(size);
  ++stats_.num_segments;
  record(MemoryEvent::Action::SegmentAlloc, addr, size, size, current_category(), stream);
}

void Allocator::note_segment_free(uint64_t addr, int64_t size, int stream) {
  stats_.reserved_bytes.decrease(size);
  --stats_.num_segments;
  record(MemoryEvent::Action::SegmentFree, addr, size, size, Category::Other, stream);
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
  std::vector<MemoryEvent> out(history_.begin() + ptrdiff_t(history_head_), history_.end());
  out.insert(out.end(), history_.begin(), history_.begin() + ptrdiff_t(history_head_));
  return out;
}

void Allocator::clear_history() {
  std::lock_guard<std::mutex> g(mu_);
  history_.clear();
  history_head_ = 0;
  history_dropped_ = 0;
}

void Allocator::set_history_max_entries(size_t n) {
  LT_CHECK(n >= 1, "bad memory history size", "max entries must be at least 1", "pass a positive number");
  std::lock_guard<std::mutex> g(mu_);
  // Linearise, then keep the newest n.
  std::vector<MemoryEvent> h(history_.begin() + ptrdiff_t(history_head_), history_.end());
  h.insert(h.end(), history_.begin(), history_.begin() + ptrdiff_t(history_head_));
  if (h.size() > n) {
    history_dropped_ += h.size() - n;
    h.erase(h.begin(), h.end() - ptrdiff_t(n));
  }
  history_ = std::move(h);
  history_head_ = 0;
  history_max_ = n;
}

size_t Allocator::history_max_entries() const {
  std::lock_guard<std::mutex> g(mu_);
  return history_max_;
}

uint64_t Allocator::history_dropped() const {
  std::lock_guard<std::mutex> g(mu_);
  return history_dropped_;
}

std::vector<LiveBlock> Allocator::live_blocks() const {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<LiveBlock> out;
  out.reserve(live_.size());
  for (const auto& [addr, b] : live_) out.push_back(b);
  return out;
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

// One clock for every allocator, so histories of two devices line up.
static int64_t history_time_us() {
  using Clock = std::chrono::steady_clock;
  static const Clock::time_point t0 = Clock::now();
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count();
}

void Allocator::record(MemoryEvent::Action a, uint64_t addr, int64_t size, int64_t requested, Category c,
                       int stream, Category from) {
  if (!history_on_) return;
  MemoryEvent e{a, addr, size, requested, c, stream, current_op()};
  e.seq = history_seq_++;
  e.time_us = history_time_us();
  e.from = from;
  if (history_.size() < history_max_) {
    history_.push_back(e);
    return;
  }
  history_[history_head_] = e;  // overwrite the oldest
  history_head_ = (history_head_ + 1) % history_.size();
  ++history_dropped_;
}

Storage::~Storage() {
  if (allocator) allocator->deallocate(block);
}

std::shared_ptr<Storage> allocate_storage(int64_t nbytes, Device d) {
  Allocator& a = allocator_for(d);
  return std::make_shared<Storage>(a.allocate(nbytes), &a, d);
}

std::shared_ptr<Storage> allocate_pinned_host(int64_t nbytes, Device d) {
  Allocator& a = pinned_host_allocator(d);
  Block b;
  try {
    b = a.allocate(nbytes);
  } catch (const OutOfMemoryError&) {
    return nullptr;  // counted in num_ooms; the caller uses pageable memory
  }
  try {
    return std::make_shared<Storage>(b, &a, Device::cpu());
  } catch (...) {
    a.deallocate(b);
    throw;
  }
}

}  // namespace lt
