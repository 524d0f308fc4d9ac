// The DataLoader. Order is a pure function of (seed, epoch), so any position can be reached
// without replaying earlier batches. Worker threads fill up to `prefetch` host batches ahead, in
// order (only host work: sample reads, normalisation); each batch is cut into one chunk of rows
// per worker, so one batch is built by all of them at once and a row's bytes never depend on
// which thread wrote it. The caller's thread allocates the device tensors, so device allocations
// happen in program order and dry runs predict them exactly.
#include <algorithm>
#include <cstring>

#include "backend/backend.h"
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

DataLoader::~DataLoader() { stop_workers(); }

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

namespace {

// Sizes h for batch (epoch, index); keeps its buffers' capacity when it is a reused one.
void shape_host_batch(DataLoader::HostBatch& h, const Dataset& ds, int64_t batch_size, int64_t epoch, int64_t index) {
  const int64_t begin = index * batch_size;
  const int64_t b = std::min<int64_t>(batch_size, ds.size() - begin);
  const int64_t in_bytes = numel(ds.input_shape()) * int64_t(dtype_size(ds.input_dtype()));
  h.size = b;
  h.epoch = epoch;
  h.index = index;
  h.inputs.resize(size_t(b * in_bytes));
  h.targets.resize(size_t(b * numel(ds.target_shape())));
}

}  // namespace

// Rows [r0, r1) of batch h: sample order[h.index * batch_size + r] goes to row r.
void DataLoader::fill_rows(HostBatch& h, const std::vector<int64_t>& order, int64_t r0, int64_t r1) const {
  const int64_t begin = h.index * opt_.batch_size;
  const int64_t in_bytes = numel(ds_->input_shape()) * int64_t(dtype_size(ds_->input_dtype()));
  const int64_t tgt_elems = numel(ds_->target_shape());
  for (int64_t r = r0; r < r1; ++r)
    ds_->get(order[size_t(begin + r)], h.inputs.data() + r * in_bytes, h.targets.data() + r * tgt_elems);
}

void DataLoader::open_slot() {
  if (order_cache_epoch_ != next_epoch_) {
    order_cache_ = std::make_shared<const std::vector<int64_t>>(epoch_order(next_epoch_));
    order_cache_epoch_ = next_epoch_;
  }
  auto s = std::make_unique<Slot>();
  if (!spare_.empty()) {
    s->h = std::move(spare_.back());
    spare_.pop_back();
  }
  shape_host_batch(s->h, *ds_, opt_.batch_size, next_epoch_, next_index_);
  s->order = order_cache_;
  s->chunk_rows = (s->h.size + opt_.workers - 1) / opt_.workers;
  s->chunks = (s->h.size + s->chunk_rows - 1) / s->chunk_rows;
  slots_.push_back(std::move(s));
  if (++next_index_ == batches_) {
    next_index_ = 0;
    ++next_epoch_;
  }
}

// Each worker claims the first unclaimed chunk of the oldest unfinished batch, opening the next
// batch when every open one is claimed and fewer than `prefetch` are open.
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
      if (!s && int64_t(slots_.size()) < opt_.prefetch) {
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
  for (auto& s : slots_)
    if (int64_t(spare_.size()) < opt_.prefetch) spare_.push_back(std::move(s->h));
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

Batch DataLoader::next() {
  HostBatch h;
  if (opt_.prefetch == 0) {
    if (order_epoch_ != epoch_) {
      order_ = epoch_order(epoch_);
      order_epoch_ = epoch_;
    }
    shape_host_batch(h, *ds_, opt_.batch_size, epoch_, index_);
    fill_rows(h, order_, 0, h.size);
  } else {
    if (!running_) start_workers();
    std::unique_lock<std::mutex> lk(mu_);
    auto front_done = [&] { return !slots_.empty() && slots_.front()->done == slots_.front()->chunks; };
    cv_.wait(lk, [&] { return front_done() || error_; });
    if (!front_done()) std::rethrow_exception(error_);
    h = std::move(slots_.front()->h);
    slots_.pop_front();
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
  Shape in_shape{h.size}, tgt_shape{h.size};
  for (int64_t d : ds_->input_shape()) in_shape.push_back(d);
  for (int64_t d : ds_->target_shape()) tgt_shape.push_back(d);
  {
    MemoryCategoryScope scope(Category::Input);
    out.inputs = Tensor::empty(in_shape, ds_->input_dtype(), opt_.device);
    out.targets = Tensor::empty(tgt_shape, DType::I64, opt_.device);
    Backend& be = backend_for(opt_.device);
    be.copy_from_host(out.inputs, h.inputs.data());  // synchronous: h is free afterwards
    be.copy_from_host(out.targets, h.targets.data());
  }
  if (opt_.prefetch > 0) {
    std::lock_guard<std::mutex> lk(mu_);
    if (int64_t(spare_.size()) < opt_.prefetch) spare_.push_back(std::move(h));
  }
  return out;
}

}  // namespace lt
