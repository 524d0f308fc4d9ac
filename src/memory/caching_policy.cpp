#include "memory/caching_policy.h"

#include <string>
#include <tuple>

#include "leantrain/error.h"

namespace lt {

uint64_t OrderedStreamEvents::record(int stream) {
  const uint64_t id = next_id_++;
  marks_[id] = order_.record(stream);
  return id;
}

bool OrderedStreamEvents::orders_after(uint64_t event, int stream) {
  auto it = marks_.find(event);
  LT_ASSERT(it != marks_.end());
  return order_.orders_after(stream, it->second);
}

void OrderedStreamEvents::release(uint64_t event) { marks_.erase(event); }

bool FakeSegmentSource::map(int64_t bytes, void*& ptr, uint64_t& addr) {
  if (capacity_ >= 0 && mapped_ + bytes > capacity_) return false;
  ptr = nullptr;
  addr = next_addr_;
  next_addr_ += uint64_t(bytes);  // never reused: every segment has its own address range
  mapped_ += bytes;
  return true;
}

void FakeSegmentSource::unmap(void*, uint64_t, int64_t bytes) { mapped_ -= bytes; }

int64_t caching_segment_size(int64_t size) {
  if (size <= kSmallBlockMax) return kSmallSegment;
  if (size < kMinLargeAlloc) return kLargeSegment;
  return (size + kLargeRounding - 1) / kLargeRounding * kLargeRounding;
}

bool CachingAllocator::Order::operator()(const CBlock* a, const CBlock* b) const {
  return std::tie(a->seg->stream, a->size, a->seg->id, a->offset) <
         std::tie(b->seg->stream, b->size, b->seg->id, b->offset);
}

CachingAllocator::CachingAllocator(Device d, std::unique_ptr<SegmentSource> source)
    : Allocator(d), source_(std::move(source)), events_(std::make_unique<OrderedStreamEvents>(order_)) {}

CachingAllocator::~CachingAllocator() {
  // Only reached for allocators owned by tests: registry allocators live until exit.
  for (Waiting& w : waiting_)
    for (uint64_t e : w.events) events_->release(e);
  for (Segment* s : segments_) {
    try {
      source_->unmap(s->ptr, s->addr, s->size);
    } catch (...) {
    }
    for (CBlock* b = s->head; b;) {
      CBlock* n = b->next;
      delete b;
      b = n;
    }
    delete s;
  }
}

CachingAllocator::CBlock* CachingAllocator::find_free(Pool& pool, int stream, int64_t size) {
  Segment key_seg;
  key_seg.stream = stream;
  CBlock key;
  key.seg = &key_seg;
  key.size = size;
  auto it = pool.lower_bound(&key);  // smallest block of this stream that is large enough
  if (it == pool.end() || (*it)->seg->stream != stream) return nullptr;
  CBlock* b = *it;
  pool.erase(it);
  return b;
}

CachingAllocator::CBlock* CachingAllocator::map_segment(int stream, int64_t size, bool small) {
  const int64_t seg_size = caching_segment_size(size);
  if (limit_ >= 0 && stats_.reserved_bytes.current + seg_size > limit_) return nullptr;
  void* ptr = nullptr;
  uint64_t addr = 0;
  if (!source_->map(seg_size, ptr, addr)) return nullptr;
  auto* s = new Segment;
  s->id = next_segment_id_++;
  s->addr = addr;
  s->ptr = ptr;
  s->size = seg_size;
  s->stream = stream;
  s->small = small;
  auto* b = new CBlock;
  b->seg = s;
  b->size = seg_size;
  s->head = b;
  segments_.push_back(s);
  note_segment_alloc(addr, seg_size, stream);
  return b;
}

bool CachingAllocator::do_allocate(Block& b) {
  const int64_t size = b.size;  // already rounded to 512 by the base
  b.stream = current_alloc_stream();
  const bool small = size <= kSmallBlockMax;
  Pool& pool = pool_for(small);
  reuse_ordered_waiting();
  CBlock* blk = find_free(pool, b.stream, size);
  if (!blk) blk = map_segment(b.stream, size, small);
  if (!blk && !waiting_.empty()) {  // the device is full: wait for the blocks other streams hold
    synchronize_waiting();
    blk = find_free(pool, b.stream, size);
  }
  if (!blk) {
    // The device is full: give back every wholly free cached segment and try once more.
    release_cached();
    note_retry();
    blk = map_segment(b.stream, size, small);
    if (!blk) return false;
  }
  const int64_t rest = blk->size - size;
  if (small ? rest >= kMinBlockSize : rest > kSmallBlockMax) {
    auto* r = new CBlock;
    r->seg = blk->seg;
    r->offset = blk->offset + size;
    r->size = rest;
    r->prev = blk;
    r->next = blk->next;
    if (blk->next) blk->next->prev = r;
    blk->next = r;
    blk->size = size;
    pool.insert(r);
  }
  blk->allocated = true;
  // An unsplit remainder stays part of the block and counts as allocated, as in PyTorch.
  b.size = blk->size;
  b.addr = blk->seg->addr + uint64_t(blk->offset);
  b.ptr = blk->seg->ptr ? static_cast<char*>(blk->seg->ptr) + blk->offset : nullptr;
  b.handle = blk;
  return true;
}

void CachingAllocator::do_free(const Block& b) {
  auto* blk = static_cast<CBlock*>(b.handle);
  LT_ASSERT(blk && blk->allocated);
  blk->allocated = false;
  if (blk->stream_uses) {  // other streams may still be using it: an event on each, then wait
    Waiting w{blk, {}};
    for (int s = 0; s < kMaxStreams; ++s)
      if (blk->stream_uses & (1u << s)) w.events.push_back(events_->record(s));
    blk->stream_uses = 0;
    blk->waiting = true;
    waiting_.push_back(std::move(w));
    return;
  }
  to_pool(blk);
}

void CachingAllocator::to_pool(CBlock* blk) {
  Pool& pool = pool_for(blk->seg->small);
  if (CBlock* p = blk->prev; p && !p->allocated && !p->waiting) {  // absorb into the free block before
    pool.erase(p);
    p->size += blk->size;
    p->next = blk->next;
    if (p->next) p->next->prev = p;
    delete blk;
    blk = p;
  }
  if (CBlock* n = blk->next; n && !n->allocated && !n->waiting) {  // absorb the free block after
    pool.erase(n);
    blk->size += n->size;
    blk->next = n->next;
    if (blk->next) blk->next->prev = blk;
    delete n;
  }
  pool.insert(blk);
}

void CachingAllocator::reuse_ordered_waiting() {
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    CBlock* blk = it->block;
    bool ordered = true;
    for (uint64_t e : it->events) ordered = ordered && events_->orders_after(e, blk->seg->stream);
    if (!ordered) {
      ++it;
      continue;
    }
    for (uint64_t e : it->events) events_->release(e);
    blk->waiting = false;
    it = waiting_.erase(it);
    to_pool(blk);
  }
}

void CachingAllocator::synchronize_waiting() {
  std::vector<Waiting> all = std::move(waiting_);
  waiting_.clear();
  for (Waiting& w : all) {
    for (uint64_t e : w.events) {
      events_->synchronize(e);
      events_->release(e);
    }
    w.block->waiting = false;
    to_pool(w.block);
  }
}

void CachingAllocator::record_stream(const Block& b, int stream) {
  check_stream(stream);
  // Checked here, not when the block is freed (in a destructor, where an error cannot be raised).
  LT_CHECK(!device_.is_cuda() || stream < kNumDeviceStreams,
           "no stream " + std::to_string(stream) + " on " + device_.str(),
           "the CUDA backend creates " + std::to_string(kNumDeviceStreams) + " streams per device",
           "use kComputeStream, kCopyStream, kCommStream or kOptimStream");
  std::lock_guard<std::mutex> g(mu_);
  auto* blk = static_cast<CBlock*>(b.handle);
  LT_ASSERT(blk && blk->allocated);
  if (stream != blk->seg->stream) blk->stream_uses |= 1u << stream;
}

StreamMark CachingAllocator::note_event(int stream) {
  std::lock_guard<std::mutex> g(mu_);
  return order_.record(stream);
}

void CachingAllocator::note_stream_wait(int stream, const StreamMark& m) {
  std::lock_guard<std::mutex> g(mu_);
  order_.wait(stream, m);
}

void CachingAllocator::set_stream_events(std::unique_ptr<StreamEvents> events) {
  std::lock_guard<std::mutex> g(mu_);
  LT_ASSERT(waiting_.empty() && events);
  events_ = std::move(events);
}

int64_t CachingAllocator::waiting_bytes() const {
  std::lock_guard<std::mutex> g(mu_);
  int64_t n = 0;
  for (const Waiting& w : waiting_) n += w.block->size;
  return n;
}

void CachingAllocator::release_segment(CBlock* whole) {
  Segment* s = whole->seg;
  source_->unmap(s->ptr, s->addr, s->size);
  note_segment_free(s->addr, s->size, s->stream);
  std::erase(segments_, s);
  delete whole;
  delete s;
}

void CachingAllocator::release_cached() {
  for (Pool* pool : {&small_pool_, &large_pool_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      CBlock* b = *it;
      if (b->prev || b->next) {  // part of a segment that still has allocated blocks
        ++it;
        continue;
      }
      it = pool->erase(it);
      release_segment(b);
    }
  }
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> g(mu_);
  synchronize_waiting();
  release_cached();
}

std::vector<SegmentInfo> CachingAllocator::segments() const {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<SegmentInfo> out;
  for (const Segment* s : segments_) {
    SegmentInfo info;
    info.addr = s->addr;
    info.size = s->size;
    info.stream = s->stream;
    info.small = s->small;
    for (const CBlock* b = s->head; b; b = b->next) {
      info.block_sizes.push_back(b->size);
      info.block_allocated.push_back(b->allocated);
      if (b->allocated) info.allocated += b->size;
    }
    out.push_back(std::move(info));
  }
  return out;
}

uint64_t CachingAllocator::layout_fingerprint() const {
  std::lock_guard<std::mutex> g(mu_);
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the fields
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) h = (h ^ ((v >> (8 * i)) & 0xff)) * 1099511628211ull;
  };
  for (const Segment* seg : segments_) {
    mix(uint64_t(seg->size)), mix(uint64_t(seg->stream)), mix(seg->small);
    for (const CBlock* b = seg->head; b; b = b->next)
      mix(uint64_t(b->offset)), mix(uint64_t(b->size)), mix(b->allocated + 2u * b->waiting), mix(b->stream_uses);
    mix(~0ull);
  }
  return h;
}

int64_t CachingAllocator::cached_free_bytes() const {
  std::lock_guard<std::mutex> g(mu_);
  return stats_.reserved_bytes.current - stats_.allocated_bytes.current;
}

}  // namespace lt
