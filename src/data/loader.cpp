// The DataLoader. Order is a pure function of (seed, epoch), so any position can be reached
// without replaying earlier batches. A worker thread fills a bounded queue with host batches
// (only host work: sample reads, normalisation); the caller's thread allocates the device
// tensors, so device allocations happen in program order and dry runs predict them exactly.
#include <cstring>

#include "backend/backend.h"
#include "leantrain/data.h"
#include "leantrain/error.h"
#include "leantrain/random.h"

namespace lt {

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, const LoaderOptions& options)
    : ds_(std::move(dataset)), opt_(options) {
  LT_CHECK(opt_.batch_size > 0, "batch size " + std::to_string(opt_.batch_size) + " is not positive",
           "a batch needs samples", "pass a positive batch size");
  LT_CHECK(opt_.prefetch >= 0, "prefetch depth " + std::to_string(opt_.prefetch) + " is negative",
           "it counts batches prepared ahead", "pass 0 or more");
  const int64_t n = ds_->size();
  batches_ = opt_.drop_last ? n / opt_.batch_size : (n + opt_.batch_size - 1) / opt_.batch_size;
  LT_CHECK(batches_ > 0, "the dataset has " + std::to_string(n) + " samples",
           "that is not one batch of " + std::to_string(opt_.batch_size), "use a smaller batch or more data");
}

DataLoader::~DataLoader() { stop_worker(); }

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

DataLoader::HostBatch DataLoader::build(int64_t epoch, int64_t index, std::vector<int64_t>& order,
                                        int64_t& order_epoch) const {
  if (order_epoch != epoch) {
    order = epoch_order(epoch);
    order_epoch = epoch;
  }
  const int64_t begin = index * opt_.batch_size;
  const int64_t b = std::min<int64_t>(opt_.batch_size, ds_->size() - begin);
  const int64_t in_elems = numel(ds_->input_shape()), tgt_elems = numel(ds_->target_shape());
  const int64_t in_bytes = in_elems * int64_t(dtype_size(ds_->input_dtype()));
  HostBatch h;
  h.size = b;
  h.epoch = epoch;
  h.index = index;
  h.inputs.resize(size_t(b * in_bytes));
  h.targets.resize(size_t(b * tgt_elems));
  for (int64_t r = 0; r < b; ++r)
    ds_->get(order[size_t(begin + r)], h.inputs.data() + r * in_bytes, h.targets.data() + r * tgt_elems);
  return h;
}

void DataLoader::worker_loop(int64_t epoch, int64_t index) {
  std::vector<int64_t> order;
  int64_t order_epoch = -1;
  try {
    for (;;) {
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stop_ || int64_t(queue_.size()) < opt_.prefetch; });
        if (stop_) return;
      }
      HostBatch h = build(epoch, index, order, order_epoch);
      if (++index == batches_) {
        index = 0;
        ++epoch;
      }
      std::lock_guard<std::mutex> lk(mu_);
      queue_.push_back(std::move(h));
      cv_.notify_all();
    }
  } catch (...) {
    std::lock_guard<std::mutex> lk(mu_);
    error_ = std::current_exception();
    cv_.notify_all();
  }
}

void DataLoader::start_worker() {
  stop_ = false;
  running_ = true;
  worker_ = std::thread([this, e = epoch_, i = index_] { worker_loop(e, i); });
}

void DataLoader::stop_worker() {
  if (!running_) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
  queue_.clear();
  error_ = nullptr;
  running_ = false;
}

void DataLoader::seek(int64_t epoch, int64_t index) {
  LT_CHECK(epoch >= 0 && index >= 0 && index < batches_,
           "cannot seek to batch " + std::to_string(index) + " of epoch " + std::to_string(epoch),
           "an epoch has " + std::to_string(batches_) + " batches", "pass a position inside the data");
  stop_worker();  // its queue holds batches of the old position
  epoch_ = epoch;
  index_ = index;
}

Batch DataLoader::next() {
  HostBatch h;
  if (opt_.prefetch == 0) {
    h = build(epoch_, index_, order_, order_epoch_);
  } else {
    if (!running_) start_worker();
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return !queue_.empty() || error_; });
    if (queue_.empty()) std::rethrow_exception(error_);
    h = std::move(queue_.front());
    queue_.pop_front();
    cv_.notify_all();
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
  MemoryCategoryScope scope(Category::Input);
  out.inputs = Tensor::empty(in_shape, ds_->input_dtype(), opt_.device);
  out.targets = Tensor::empty(tgt_shape, DType::I64, opt_.device);
  Backend& be = backend_for(opt_.device);
  be.copy_from_host(out.inputs, h.inputs.data());
  be.copy_from_host(out.targets, h.targets.data());
  return out;
}

}  // namespace lt
