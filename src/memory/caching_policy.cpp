#include "memory/caching_policy.h"

#include <tuple>

#include "leantrain/error.h"

namespace lt {

namespace {
thread_local int t_alloc_stream = 0;
}  // namespace

int current_alloc_stream() { return t_alloc_stream; }
AllocStreamScope::AllocStreamScope(int stream) : prev_(t_alloc_stream) { t_alloc_stream = stream; }
AllocStreamScope::~AllocStreamScope() { t_alloc_stream = prev_; }

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
    : Allocator(d), source_(std::move(source)) {}

CachingAllocator::~CachingAllocator() {
  // Only reached for allocators owned by tests: registry allocators live until exit.
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
  CBlock* blk = find_free(pool, b.stream, size);
  if (!blk) blk = map_segment(b.stream, size, small);
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
  Pool& pool = pool_for(blk->seg->small);
  if (CBlock* p = blk->prev; p && !p->allocated) {  // absorb into the free block before
    pool.erase(p);
    p->size += blk->size;
    p->next = blk->next;
    if (p->next) p->next->prev = p;
    delete blk;
    blk = p;
  }
  if (CBlock* n = blk->next; n && !n->allocated) {  // absorb the free block after
    pool.erase(n);
    blk->size += n->size;
    blk->next = n->next;
    if (blk->next) blk->next->prev = blk;
    delete n;
  }
  pool.insert(blk);
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

int64_t CachingAllocator::cached_free_bytes() const {
  std::lock_guard<std::mutex> g(mu_);
  return stats_.reserved_bytes.current - stats_.allocated_bytes.current;
}

}  // namespace lt
