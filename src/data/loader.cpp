// The DataLoader. Order is a pure function of (seed, epoch), so any position can be reached
// without replaying earlier batches. Worker threads fill up to `prefetch` host batches ahead, in
// order (only host work: sample reads, normalisation); each batch is cut into one chunk of rows
// per worker, so one batch is built by all of them at once and a row's bytes never depend on
// which thread wrote it. The caller's thread allocates the device tensors, so device allocations
// happen in program order and dry runs predict them exactly.
//
// Host batches live in a ring of prefetch + 2 staging buffers, allocated once by the caller's
// thread from the device's pinned-host account (Category::Input; page-locked on CUDA, ordinary
// memory on cpu, counted alike on meta without any memory, so a plan predicts the pinned peak). next()
// enqueues the copies of a batch on the compute stream and records the buffer's event after them;
// the buffer goes back to the workers only when that event completed (so no worker rewrites bytes
// the GPU has yet to read). Only the caller's thread makes CUDA calls.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <new>

#include "backend/backend.h"
#include "core/checked_math.h"
#include "backend/event.h"
#include "data/host_bytes.h"
#include "leantrain/data.h"
#include "leantrain/error.h"
#include "leantrain/random.h"

namespace lt {

int default_loader_workers() {
  const int hw = int(std::thread::hardware_concurrency());  // 0 when unknown
  return std::clamp(hw - 1, 1, 8);
}

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, const LoaderOptions& options)
    : ds_(std::move(dataset)), opt_(options) {
  LT_CHECK(opt_.batch_size > 0, "batch size " + std::to_string(opt_.batch_size) + " is not positive",
           "a batch needs samples", "pass a positive batch size");
  LT_CHECK(opt_.prefetch >= 0, "prefetch depth " + std::to_string(opt_.prefetch) + " is negative",
           "it counts batches prepared ahead", "pass 0 or more");
  LT_CHECK(opt_.workers >= 1, "loader workers " + std::to_string(opt_.workers) + " is not positive",
           "it counts the threads that build batches", "pass 1 or more");
  const int64_t n = ds_->size();
  batches_ = opt_.drop_last ? n / opt_.batch_size : (n + opt_.batch_size - 1) / opt_.batch_size;
  LT_CHECK(batches_ > 0, "the dataset has " + std::to_string(n) + " samples",
           "that is not one batch of " + std::to_string(opt_.batch_size), "use a smaller batch or more data");
}

DataLoader::~DataLoader() {
  stop_workers();
  free_buffers();
}

// Fisher-Yates driven by counter-based random numbers keyed on (seed, epoch): the same on every
// platform and standard library.
std::vector<int64_t> DataLoader::epoch_order(int64_t epoch) const {
  const int64_t n = ds_->size();
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[size_t(i)] = i;
  if (!opt_.shuffle) return order;
  const uint64_t key = rng_mix64(opt_.seed ^ rng_mix64(uint64_t(epoch) + 0x5eedull));
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = int64_t(rng_mix64(key + uint64_t(i)) % uint64_t(i + 1));
    std::swap(order[size_t(i)], order[size_t(j)]);
  }
  return order;
}

// Points h at staging buffer `buffer` for batch (epoch, index).
void DataLoader::shape_host_batch(HostBatch& h, int buffer, int64_t epoch, int64_t index) const {
  const int64_t begin = index * opt_.batch_size;
  h.size = std::min<int64_t>(opt_.batch_size, ds_->size() - begin);
  h.epoch = epoch;
  h.index = index;
  h.buffer = buffer;
  uint8_t* mem = buffers_[size_t(buffer)].mem;
  h.inputs = mem;
  h.targets = mem ? reinterpret_cast<int64_t*>(mem + targets_offset_) : nullptr;  // meta's have no memory
  h.aux = mem && ds_->aux_size() > 0 ? reinterpret_cast<float*>(mem + aux_offset_) : nullptr;
  h.doc_pos = mem && ds_->has_doc_pos() ? reinterpret_cast<int32_t*>(mem + doc_pos_offset_) : nullptr;
  h.text_mask = mem && opt_.text_mask ? mem + text_mask_offset_ : nullptr;
  h.row_tokens.clear();
}

// Each row's text tokens, when the dataset counts them (rows with padding).
void DataLoader::count_tokens(HostBatch& h, const std::vector<int64_t>& order) const {
  const int64_t begin = h.index * opt_.batch_size;
  h.row_tokens.clear();
  for (int64_t r = 0; r < h.size; ++r) {
    const int64_t n = ds_->real_tokens(order[size_t(begin + r)]);
    if (n < 0) {
      h.row_tokens.clear();
      return;
    }
    h.row_tokens.push_back(n);
  }
}

// A full batch's inputs, then its targets at a 64-byte boundary, then its aux values (if any), its
// document positions (packed documents) and its text mask (LoaderOptions::text_mask) each at the
// next one, in each buffer. Pinned memory
// is limited: if any buffer is refused, all of them are pageable (copies are then synchronous).
void DataLoader::ensure_buffers() {
  if (!buffers_.empty()) return;
  // The sample shapes come from data files (an IDX header's image size): multiply with checks.
  const std::string what = "a host batch buffer (batch " + std::to_string(opt_.batch_size) + ")";
  const std::string fix = "use a smaller --batch or smaller samples";
  const int64_t in_bytes = checked_product(
      Shape{opt_.batch_size, numel(ds_->input_shape()), int64_t(dtype_size(ds_->input_dtype()))}, what, fix);
  targets_offset_ = checked_add<int64_t>(in_bytes, 63, what, fix) / 64 * 64;
  const int64_t targets_end =
      checked_add(targets_offset_,
                  checked_product(Shape{opt_.batch_size, numel(ds_->target_shape()), int64_t(sizeof(int64_t))}, what, fix),
                  what, fix);
  aux_offset_ = checked_add<int64_t>(targets_end, 63, what, fix) / 64 * 64;
  buffer_bytes_ = ds_->aux_size() > 0 ? checked_add(aux_offset_,
                                                    checked_product(Shape{opt_.batch_size, ds_->aux_size(), 4}, what, fix),
                                                    what, fix)
                                      : targets_end;
  if (ds_->has_doc_pos()) {
    doc_pos_offset_ = checked_add<int64_t>(buffer_bytes_, 63, what, fix) / 64 * 64;
    buffer_bytes_ = checked_add(doc_pos_offset_,
                                checked_product(Shape{opt_.batch_size, numel(ds_->input_shape()), int64_t(sizeof(int32_t))},
                                                what, fix),
                                what, fix);
  }
  if (opt_.text_mask) {
    text_mask_offset_ = checked_add<int64_t>(buffer_bytes_, 63, what, fix) / 64 * 64;
    buffer_bytes_ = checked_add(text_mask_offset_, checked_product(Shape{opt_.batch_size, numel(ds_->input_shape())}, what, fix),
                                what, fix);
  }
  const int n = opt_.prefetch + 2;
  try {
    bool staged = opt_.pin_memory;
    {
      MemoryCategoryScope scope(Category::Input);
      for (int i = 0; i < n && staged; ++i) {
        std::shared_ptr<Storage> p = allocate_pinned_host(buffer_bytes_, opt_.device);
        if (!p) {
          staged = false;
          break;
        }
        auto* mem = static_cast<uint8_t*>(p->data());
        buffers_.push_back(Buffer{mem, std::move(p), std::make_shared<Event>(opt_.device)});
      }
    }
    if (!staged) {
      if (opt_.pin_memory) {
        static std::atomic<bool> warned{false};
        if (!warned.exchange(true))
          std::fprintf(stderr,
                       "leantrain: warning: %d pinned host buffers of %.1f MiB for the data loader were refused; "
                       "batches are copied from pageable memory (slower)\n",
                       n, double(buffer_bytes_) / double(1 << 20));
      }
      free_buffers();
      for (int i = 0; i < n; ++i)
        buffers_.push_back(Buffer{opt_.device.is_meta() ? nullptr  // a dry run fills none
                                                        : static_cast<uint8_t*>(::operator new(size_t(buffer_bytes_), std::align_val_t{64})),
                                  nullptr, nullptr});
    }
  } catch (...) {
    free_buffers();
    throw;
  }
  pinned_ = buffers_.front().event && buffers_.front().event->asynchronous();
  spare_.clear();
  for (int i = n - 1; i >= 0; --i) spare_.push_back(i);  // buffer 0 first
}

// Waits for every copy still reading a buffer, then frees them all. No worker may be running.
void DataLoader::free_buffers() noexcept {
  if (buffers_.empty()) return;
  try {
    for (int i : inflight_)
      if (buffers_[size_t(i)].event) buffers_[size_t(i)].event->synchronize();
  } catch (...) {
    // the device is gone or broken; nothing is reading the buffers any more
  }
  inflight_.clear();
  spare_.clear();
  for (Buffer& b : buffers_)
    if (!b.pinned) ::operator delete(b.mem, std::align_val_t{64});
  buffers_.clear();  // pinned buffers go back to the pinned-host account, events to the backend
  pinned_ = false;
}

void DataLoader::release(int buffer) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    spare_.push_back(buffer);
  }
  cv_.notify_all();  // a worker may be waiting for a buffer
}

// Copies complete in the order they were enqueued (one stream), so only the oldest is checked.
// Polling is timing: it only recycles host buffers, never decides a device allocation.
void DataLoader::reclaim(size_t keep) {
  while (!inflight_.empty()) {
    const int i = inflight_.front();
    Event* ev = buffers_[size_t(i)].event.get();
    if (ev && !ev->done()) {
      if (inflight_.size() <= keep) break;
      ev->synchronize();
    }
    inflight_.pop_front();
    release(i);
  }
}

// Rows [r0, r1) of batch h: sample order[h.index * batch_size + r] goes to row r.
void DataLoader::fill_rows(HostBatch& h, const std::vector<int64_t>& order, int64_t r0, int64_t r1) const {
  const int64_t begin = h.index * opt_.batch_size;
  const int64_t in_bytes = numel(ds_->input_shape()) * int64_t(dtype_size(ds_->input_dtype()));
  const int64_t tgt_elems = numel(ds_->target_shape()), pos_elems = numel(ds_->input_shape());
  const int64_t aux_n = ds_->aux_size();
  for (int64_t r = r0; r < r1; ++r) {
    ds_->get(order[size_t(begin + r)], h.inputs + r * in_bytes, h.targets + r * tgt_elems);
    if (aux_n > 0) ds_->get_aux(order[size_t(begin + r)], h.aux + r * aux_n);
    if (h.doc_pos) ds_->get_doc_pos(order[size_t(begin + r)], h.doc_pos + r * pos_elems);
    if (h.text_mask) ds_->get_text_mask(order[size_t(begin + r)], h.text_mask + r * pos_elems);
  }
}

void DataLoader::open_slot() {
  if (order_cache_epoch_ != next_epoch_) {
    order_cache_ = std::make_shared<const std::vector<int64_t>>(epoch_order(next_epoch_));
    order_cache_epoch_ = next_epoch_;
  }
  auto s = std::make_unique<Slot>();
  LT_ASSERT(!spare_.empty());
  shape_host_batch(s->h, spare_.back(), next_epoch_, next_index_);
  spare_.pop_back();
  s->order = order_cache_;
  count_tokens(s->h, *s->order);
  s->chunk_rows = (s->h.size + opt_.workers - 1) / opt_.workers;
  s->chunks = (s->h.size + s->chunk_rows - 1) / s->chunk_rows;
  slots_.push_back(std::move(s));
  if (++next_index_ == batches_) {
    next_index_ = 0;
    ++next_epoch_;
  }
}

// Each worker claims the first unclaimed chunk of the oldest unfinished batch, opening the next
// batch when every open one is claimed, fewer than `prefetch` are open and a buffer is free.
void DataLoader::worker_loop() {
  std::unique_lock<std::mutex> lk(mu_);
  try {
    for (;;) {
      if (stop_ || error_) return;
      Slot* s = nullptr;
      for (auto& p : slots_)
        if (p->claimed < p->chunks) {
          s = p.get();
          break;
        }
      if (!s && int64_t(slots_.size()) < opt_.prefetch && !spare_.empty()) {
        open_slot();
        s = slots_.back().get();
        if (s->chunks > 1) cv_.notify_all();  // idle workers can take its other chunks
      }
      if (!s) {
        cv_.wait(lk);
        continue;
      }
      const int64_t r0 = s->claimed++ * s->chunk_rows;
      const int64_t r1 = std::min(s->h.size, r0 + s->chunk_rows);
      lk.unlock();
      fill_rows(s->h, *s->order, r0, r1);  // s stays put: the caller takes it only when all chunks are done
      lk.lock();
      if (++s->done == s->chunks) cv_.notify_all();
    }
  } catch (...) {
    if (!lk.owns_lock()) lk.lock();
    error_ = std::current_exception();
    cv_.notify_all();
  }
}

void DataLoader::start_workers() {
  stop_ = false;
  error_ = nullptr;
  next_epoch_ = epoch_;
  next_index_ = index_;
  running_ = true;
  try {
    for (int w = 0; w < opt_.workers; ++w) workers_.emplace_back([this] { worker_loop(); });
  } catch (...) {
    stop_workers();
    throw;
  }
}

void DataLoader::stop_workers() {
  if (!running_) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
  for (auto& s : slots_) spare_.push_back(s->h.buffer);  // never copied from: free at once
  slots_.clear();
  error_ = nullptr;
  running_ = false;
}

void DataLoader::seek(int64_t epoch, int64_t index) {
  LT_CHECK(epoch >= 0 && index >= 0 && index < batches_,
           "cannot seek to batch " + std::to_string(index) + " of epoch " + std::to_string(epoch),
           "an epoch has " + std::to_string(batches_) + " batches", "pass a position inside the data");
  stop_workers();  // their batches are of the old position
  epoch_ = epoch;
  index_ = index;
}

// Allocates the batch's device tensors (inputs, targets, then aux values and document positions when the
// dataset has them, the text mask when asked for; category
// Input) and copies h into them: enqueued from pinned buffers, synchronous from pageable ones.
void DataLoader::to_device(const HostBatch& h, Batch& out) {
  Shape in_shape{h.size}, tgt_shape{h.size};
  for (int64_t d : ds_->input_shape()) in_shape.push_back(d);
  for (int64_t d : ds_->target_shape()) tgt_shape.push_back(d);
  MemoryCategoryScope scope(Category::Input);
  out.inputs = Tensor::empty(in_shape, ds_->input_dtype(), opt_.device);
  out.targets = Tensor::empty(tgt_shape, DType::I64, opt_.device);
  const int64_t aux_n = ds_->aux_size();
  if (aux_n > 0) out.aux = Tensor::empty({h.size, aux_n}, DType::F32, opt_.device);
  if (ds_->has_doc_pos()) out.doc_pos = Tensor::empty(in_shape, DType::I32, opt_.device);
  if (opt_.text_mask) out.text_mask = Tensor::empty(in_shape, DType::U8, opt_.device);
  out.row_tokens = h.row_tokens;
  Backend& be = backend_for(opt_.device);
  // Integer inputs (token ids) and the targets keep their bytes on the host too: the embedding's
  // and the loss's checks read them there instead of waiting for the device mid-step.
  if (opt_.device.is_cuda()) {
    if (ds_->input_dtype() == DType::I64 || ds_->input_dtype() == DType::I32) keep_host_bytes(out.inputs, h.inputs);
    keep_host_bytes(out.targets, h.targets);
    if (out.doc_pos.defined()) keep_host_bytes(out.doc_pos, h.doc_pos);  // GPT-2's position lookup reads them
  }
  const Buffer& buf = buffers_[size_t(h.buffer)];
  if (buf.pinned) {
    be.copy_from_host_async(out.inputs, h.inputs);
    be.copy_from_host_async(out.targets, h.targets);
    if (aux_n > 0) be.copy_from_host_async(out.aux, h.aux);
    if (out.doc_pos.defined()) be.copy_from_host_async(out.doc_pos, h.doc_pos);
    if (out.text_mask.defined()) be.copy_from_host_async(out.text_mask, h.text_mask);
    buf.event->record();
  } else {
    be.copy_from_host(out.inputs, h.inputs);  // synchronous: the buffer is free afterwards
    be.copy_from_host(out.targets, h.targets);
    if (aux_n > 0) be.copy_from_host(out.aux, h.aux);
    if (out.doc_pos.defined()) be.copy_from_host(out.doc_pos, h.doc_pos);
    if (out.text_mask.defined()) be.copy_from_host(out.text_mask, h.text_mask);
  }
}

Batch DataLoader::next() {
  ensure_buffers();
  reclaim(inflight_.size());  // buffers whose copies are done go back to the workers, no waiting
  HostBatch h;
  if (opt_.device.is_meta()) {
    // A dry run: the buffers are accounts without memory and the batch's tensors have no data,
    // so no sample is read and no worker starts; the allocations are a real run's.
    shape_host_batch(h, spare_.back(), epoch_, index_);
    spare_.pop_back();
  } else if (opt_.prefetch == 0) {
    if (order_epoch_ != epoch_) {
      order_ = epoch_order(epoch_);
      order_epoch_ = epoch_;
    }
    if (spare_.empty()) reclaim(inflight_.size() - 1);  // every buffer is being copied from: wait for the oldest
    LT_ASSERT(!spare_.empty());
    shape_host_batch(h, spare_.back(), epoch_, index_);
    spare_.pop_back();
    count_tokens(h, order_);
    try {
      fill_rows(h, order_, 0, h.size);
    } catch (...) {
      release(h.buffer);
      throw;
    }
  } else {
    if (!running_) start_workers();
    std::unique_lock<std::mutex> lk(mu_);
    auto front_done = [&] { return !slots_.empty() && slots_.front()->done == slots_.front()->chunks; };
    cv_.wait(lk, [&] { return front_done() || error_; });
    if (!front_done()) std::rethrow_exception(error_);
    h = slots_.front()->h;
    slots_.pop_front();
    lk.unlock();
    cv_.notify_all();  // room for one more batch ahead
  }
  LT_ASSERT(h.epoch == epoch_ && h.index == index_);
  if (++index_ == batches_) {
    index_ = 0;
    ++epoch_;
  }

  Batch out;
  out.epoch = h.epoch;
  out.index = h.index;
  try {
    to_device(h, out);
  } catch (...) {
    if (buffers_[size_t(h.buffer)].pinned) {
      try {
        backend_for(opt_.device).synchronize();  // a copy may have been enqueued before the failure
      } catch (...) {
      }
    }
    release(h.buffer);
    throw;
  }
  if (buffers_[size_t(h.buffer)].pinned && !opt_.device.is_meta()) {
    inflight_.push_back(h.buffer);
    reclaim(2);  // at most two batches' copies pending; waits only when the GPU is that far behind
  } else {
    release(h.buffer);
  }
  return out;
}

}  // namespace lt
